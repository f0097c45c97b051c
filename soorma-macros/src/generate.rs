//! Code generation: [`FnModel`] → tokens.
//!
//! The output is the user's function (without its soorma attributes), a type-namespace item
//! of the same name and visibility (`struct name {}`: a braced struct occupies only the type
//! namespace) that lists the function's handlers for `handlers![..]`, and an anonymous
//! `const` block that builds each handler, implements `HandlerSet` for that struct and
//! submits each `HandlerRegistration` to `inventory`. Everything is referenced through the
//! soorma crate's `__private` module with fully qualified paths, so users need no extra
//! dependencies or imports.
//!
//! # Diagnostics
//!
//! There are no separate type checks: the registration call itself is the check, written so
//! that each unsatisfied bound is reported once, at the user's tokens.
//! - Its explicit type arguments are the user's own types (payload, task state, a fan-in's
//!   replies, the extractors): a bound on them (e.g. `T: JsonSchema`) is reported at that
//!   type. A typed payload goes through `__private::RequestType<T>`, so that "`T` is not a
//!   request type" is reported once, at `T`. A string-named handler's payload
//!   is the constructor's `T: HandlerPayload`, whose message names the derives.
//! - The call is spanned from the function's name to its parameter list's closing
//!   parenthesis: what the runtime requires of the function as a whole (a `Send` future,
//!   which rustc then explains by naming the value held across `.await`; extractors) is
//!   reported on the signature.
//! - The function is passed as `::core::convert::identity(f)` spanned on its return type,
//!   so that a bound on its output (`HandlerOutput`, `ToolReply<R>`, `FanInOutput<R>`) is
//!   reported at the return type.

use proc_macro2::{Delimiter, Group, Ident, Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{ItemFn, LitStr, Path, Type};

use crate::model::{FnModel, HandlerKind, HandlerModel};

/// Generates the function, its handler set and its registrations.
pub(crate) fn generate(model: &FnModel) -> TokenStream {
    let FnModel { item_fn, handlers } = model;
    let fn_ident = &item_fn.sig.ident;
    let fn_name = LitStr::new(&fn_ident.unraw().to_string(), fn_ident.span());
    let set_krate = krate(handlers.first().and_then(|h| h.krate.as_ref()));

    let mut builders = Vec::new();
    let mut registrations = Vec::new();
    for (i, handler) in handlers.iter().enumerate() {
        let build = format_ident!("__soorma_handler_{}", i);
        let krate = krate(handler.krate.as_ref());
        let expr = handler_expr(handler, fn_ident);
        builders.push(quote! {
            fn #build() -> #krate::__private::Handler {
                #expr
            }
        });
        let agent = match &handler.agent {
            Some(agent) => quote!(::core::option::Option::Some(#agent)),
            None => quote!(::core::option::Option::None),
        };
        registrations.push((
            krate.clone(),
            quote! {
                #krate::__private::HandlerRegistration::at(
                    #agent,
                    ::core::module_path!(),
                    #fn_name,
                    #build,
                )
            },
        ));
    }
    let submits = registrations.iter().map(|(krate, registration)| {
        quote! {
            #krate::__private::inventory::submit! { #registration }
        }
    });
    let listed = registrations
        .iter()
        .map(|(_, registration)| quote!(#registration.handler()));
    let set = handler_set(item_fn);

    quote! {
        #item_fn

        #set

        #[doc(hidden)]
        const _: () = {
            #(#builders)*

            #[automatically_derived]
            impl #set_krate::__private::HandlerSet for #fn_ident {
                fn handlers() -> ::std::vec::Vec<#set_krate::__private::Handler> {
                    ::std::vec![#(#listed),*]
                }
            }

            #(#submits)*
        };
    }
}

/// What an expansion that failed emits besides its errors: the function (so that its uses do
/// not cascade into "cannot find function"), and its handler set, empty (so that
/// `handlers![..]` listing it does not either).
pub(crate) fn generate_failure(item_fn: &ItemFn, krate_path: Option<&Path>) -> TokenStream {
    // A method (`self` receiver) is in an `impl`, where neither a struct nor an anonymous
    // `const` may go: only the method is emitted.
    if item_fn.sig.receiver().is_some() {
        return item_fn.to_token_stream();
    }
    let krate = krate(krate_path);
    let fn_ident = &item_fn.sig.ident;
    let set = handler_set(item_fn);
    quote! {
        #item_fn

        #set

        #[doc(hidden)]
        const _: () = {
            #[automatically_derived]
            impl #krate::__private::HandlerSet for #fn_ident {
                fn handlers() -> ::std::vec::Vec<#krate::__private::Handler> {
                    ::std::vec::Vec::new()
                }
            }
        };
    }
}

/// The type-namespace item named like the function, with its visibility.
fn handler_set(item_fn: &ItemFn) -> TokenStream {
    let vis = &item_fn.vis;
    let fn_ident = &item_fn.sig.ident;
    quote! {
        /// The handlers of the function of the same name, for `handlers![..]`.
        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code, missing_docs, unreachable_pub)]
        #vis struct #fn_ident {}
    }
}

/// The path of the soorma crate: `crate = "..."`, or `::soorma`.
fn krate(path: Option<&Path>) -> TokenStream {
    match path {
        Some(path) => path.to_token_stream(),
        None => quote!(::soorma),
    }
}

/// `tokens` with every span (recursively) set to `span`.
fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(group) => {
                let mut new = Group::new(group.delimiter(), respan(group.stream(), span));
                new.set_span(span);
                TokenTree::Group(new)
            }
            mut other => {
                other.set_span(span);
                other
            }
        })
        .collect()
}

/// The spans of the first and the last token of `tokens` (a group's span covers it whole).
fn edge_spans(tokens: impl ToTokens) -> (Span, Span) {
    let mut trees = tokens.into_token_stream().into_iter();
    let first = trees.next().map_or_else(Span::call_site, |t| t.span());
    let last = trees.last().map_or(first, |t| t.span());
    (first, last)
}

/// `__private::RequestType<ty>`, spanned on `ty`: "`ty` is not a request type" is reported
/// there.
fn request_type(krate: &TokenStream, ty: &Type) -> TokenStream {
    let (first, last) = edge_spans(ty);
    let krate = respan(krate.clone(), first);
    let open = quote_spanned!(first=> #krate::__private::RequestType<);
    let close = quote_spanned!(last=> >);
    quote!(#open #ty #close)
}

/// A member of a fan-in's request set: a request type, or a batch of one (`Vec<R>`), whose
/// element is the request type.
fn set_member(krate: &TokenStream, ty: &Type) -> TokenStream {
    match batch_element(ty) {
        Some(element) => {
            let inner = request_type(krate, element);
            quote!(::std::vec::Vec<#inner>)
        }
        None => request_type(krate, ty),
    }
}

/// `R` when `ty` is `Vec<R>` (a batch of requests).
pub(crate) fn batch_element(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Vec" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>().as_slice() {
        [syn::GenericArgument::Type(element)] => Some(element),
        _ => None,
    }
}

/// A type argument the compiler infers.
fn infer(span: Span) -> TokenStream {
    quote_spanned!(span=> _)
}

/// The expression building one handler.
fn handler_expr(handler: &HandlerModel, fn_ident: &Ident) -> TokenStream {
    let HandlerModel {
        kind,
        topic,
        event,
        requests,
        description,
        name,
        sig,
        ..
    } = handler;
    let krate = krate(handler.krate.as_ref());
    let at_fn = fn_ident.span();
    let handler_path = {
        let krate = respan(krate.clone(), at_fn);
        quote_spanned!(at_fn=> #krate::__private::Handler)
    };

    // The function, spanned on its return type (bounds on its output are reported there).
    let function = match &sig.output {
        Some(output) => {
            let (first, last) = edge_spans(output);
            let mut args = Group::new(Delimiter::Parenthesis, fn_ident.to_token_stream());
            args.set_span(last);
            quote_spanned!(first=> ::core::convert::identity #args)
        }
        None => fn_ident.to_token_stream(),
    };

    let payload = sig.payload.as_ref();
    let typed = event.is_none() && kind.typed_constructor().is_some();
    let payload_arg = match (typed, payload) {
        (true, Some(ty)) => request_type(&krate, ty),
        (false, Some(ty)) => ty.to_token_stream(),
        (_, None) => infer(at_fn),
    };
    let state_arg = sig
        .state
        .as_ref()
        .map_or_else(|| infer(at_fn), ToTokens::to_token_stream);
    let extractors = &sig.extractors;
    let extractors = quote_spanned!(at_fn=> (#(#extractors,)*));
    let event = event.as_ref();

    // `Handler::<constructor>::<generics>` and its arguments.
    let (callee, args) = match kind {
        HandlerKind::Event => {
            let variant = topic.as_ref().map(|t| &t.variant);
            let topic_span = topic.as_ref().map_or(at_fn, |t| t.lit.span());
            let topic_krate = respan(krate.clone(), topic_span);
            let topic = quote_spanned!(topic_span=> #topic_krate::__private::Topic::#variant);
            (
                quote_spanned!(at_fn=> #handler_path::on_event::<_, #payload_arg, #extractors>),
                quote!(#topic, #event, #function),
            )
        }
        HandlerKind::Invoke | HandlerKind::Goal if typed => {
            let constructor = Ident::new(kind.typed_constructor().unwrap_or_default(), at_fn);
            (
                quote_spanned!(at_fn=> #handler_path::#constructor::<_, #payload_arg, #extractors>),
                quote!(#function),
            )
        }
        HandlerKind::Invoke | HandlerKind::Result | HandlerKind::Goal => {
            let constructor = Ident::new(kind.attr_name(), at_fn);
            (
                quote_spanned!(at_fn=> #handler_path::#constructor::<_, #payload_arg, #extractors>),
                quote!(#event, #function),
            )
        }
        HandlerKind::Task if typed => (
            quote_spanned!(at_fn=> #handler_path::task::<_, #payload_arg, #state_arg, #extractors>),
            quote!(#function),
        ),
        HandlerKind::Task => (
            quote_spanned!(at_fn=> #handler_path::on_task::<_, #payload_arg, #state_arg, #extractors>),
            quote!(#event, #function),
        ),
        HandlerKind::Transition => (
            quote_spanned!(at_fn=> #handler_path::on_transition::<_, #extractors>),
            quote!(#function),
        ),
        HandlerKind::FanIn => {
            let requests: Vec<TokenStream> =
                requests.iter().map(|r| set_member(&krate, r)).collect();
            let set = match requests.as_slice() {
                [one] => one.clone(),
                many => quote!((#(#many),*)),
            };
            let task = payload.map_or_else(|| infer(at_fn), |ty| request_type(&krate, ty));
            let replies = sig
                .value
                .as_ref()
                .map_or_else(|| infer(at_fn), ToTokens::to_token_stream);
            (
                quote_spanned! {at_fn=>
                    #handler_path::fan_in::<#set>()
                        .handle::<_, #task, #state_arg, #replies, #extractors>
                },
                quote!(#function),
            )
        }
    };
    let mut args = Group::new(Delimiter::Parenthesis, args);
    args.set_span(sig.params_close);

    let with_description = (!description.is_empty()).then(|| {
        let description = LitStr::new(description, Span::call_site());
        quote!(.with_description(#description))
    });
    let with_name = name.as_ref().map(|name| quote!(.with_name(#name)));
    quote! {
        #callee #args
            #with_description
            #with_name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::parse_fn;

    fn expand(kind: HandlerKind, args: TokenStream, item: TokenStream) -> String {
        let model = match parse_fn(kind, args, item) {
            Ok(model) => model,
            Err(failure) => panic!("invalid handler: {}", failure.error),
        };
        generate(&model).to_string()
    }

    #[test]
    fn invoke() {
        let out = expand(
            HandlerKind::Invoke,
            quote!(
                "calculate.requested",
                agent = "calculator",
                name = "calculate"
            ),
            quote! {
                /// Evaluates an arithmetic expression.
                async fn calculate(req: Invocation<Calculate>) -> Result<Calculated, ToolError> { todo!() }
            },
        );
        assert!(out.contains("inventory :: submit"), "{out}");
        assert!(
            out.contains(
                ":: soorma :: __private :: Handler :: on_invoke :: < _ , Calculate , () > \
                 (\"calculate.requested\" , :: core :: convert :: identity (calculate)) \
                 . with_description (\"Evaluates an arithmetic expression.\") \
                 . with_name (\"calculate\")"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                ":: soorma :: __private :: HandlerRegistration :: at (:: core :: option :: Option :: Some (\"calculator\") , :: core :: module_path ! () , \"calculate\" , __soorma_handler_0 ,)"
            ),
            "{out}"
        );
        // The function itself is re-emitted, doc comment included, then its handler set.
        assert!(
            out.starts_with("# [doc =")
                && out.contains(" Evaluates an arithmetic expression.\"] async fn calculate (req"),
            "{out}"
        );
        assert!(out.contains("struct calculate { }"), "{out}");
        assert!(
            out.contains("impl :: soorma :: __private :: HandlerSet for calculate"),
            "{out}"
        );
        assert!(out.contains("# [doc (hidden)] const _ : () ="), "{out}");
    }

    #[test]
    fn typed_invoke_task_goal() {
        let out = expand(
            HandlerKind::Invoke,
            quote!(),
            quote!(
                pub async fn calc(
                    req: Invocation<Calculate>,
                    s: State<Db>,
                ) -> Result<Calculated, ToolError> {
                    todo!()
                }
            ),
        );
        assert!(
            out.contains(
                ":: soorma :: __private :: Handler :: invoke :: < _ , :: soorma :: __private :: RequestType < Calculate > , (State < Db > ,) > (:: core :: convert :: identity (calc))"
            ),
            "{out}"
        );
        assert!(out.contains("pub struct calc { }"), "{out}");

        let out = expand(
            HandlerKind::Task,
            quote!(agent = "researcher"),
            quote!(
                async fn research(task: TaskContext<Research, Notes>) -> soorma::Result<()> {
                    todo!()
                }
            ),
        );
        assert!(
            out.contains(
                "Handler :: task :: < _ , :: soorma :: __private :: RequestType < Research > , Notes , () > (:: core :: convert :: identity (research))"
            ),
            "{out}"
        );
        let out = expand(
            HandlerKind::Goal,
            quote!(),
            quote!(
                async fn plan(goal: GoalContext<Trip>) {}
            ),
        );
        assert!(
            out.contains(
                "Handler :: goal :: < _ , :: soorma :: __private :: RequestType < Trip > , () > (plan)"
            ),
            "{out}"
        );
    }

    #[test]
    fn fan_in() {
        let out = expand(
            HandlerKind::FanIn,
            quote!(Search, Summarize, agent = "researcher"),
            quote!(
                async fn collect(
                    task: TaskContext<Research>,
                    (a, b): (Hits, Summary),
                    bus: BusClient,
                ) -> soorma::Result<Report> {
                    todo!()
                }
            ),
        );
        assert!(
            out.contains(
                "Handler :: fan_in :: < (:: soorma :: __private :: RequestType < Search > , :: soorma :: __private :: RequestType < Summarize >) > () \
                 . handle :: < _ , :: soorma :: __private :: RequestType < Research > , _ , (Hits , Summary) , (BusClient ,) > (:: core :: convert :: identity (collect))"
            ),
            "{out}"
        );
        let out = expand(
            HandlerKind::FanIn,
            quote!(Search),
            quote!(
                async fn count(
                    task: TaskContext<Research, Notes>,
                    hits: Hits,
                ) -> soorma::Result<usize> {
                    todo!()
                }
            ),
        );
        assert!(
            out.contains(
                "fan_in :: < :: soorma :: __private :: RequestType < Search > > () . handle :: < _ , :: soorma :: __private :: RequestType < Research > , Notes , Hits , () >"
            ),
            "{out}"
        );
    }

    #[test]
    fn event_without_description_or_agent() {
        let out = expand(
            HandlerKind::Event,
            quote!("business-facts", "order.placed"),
            quote!(
                async fn r#on_order(e: Event<OrderPlaced>) {}
            ),
        );
        assert!(
            out.contains(
                ":: soorma :: __private :: Handler :: on_event :: < _ , OrderPlaced , () > (:: soorma :: __private :: Topic :: BusinessFacts , \"order.placed\" , r#on_order)"
            ),
            "{out}"
        );
        assert!(!out.contains("with_description"), "{out}");
        assert!(!out.contains("with_name"), "{out}");
        assert!(
            out.contains("at (:: core :: option :: Option :: None , :: core :: module_path ! () , \"on_order\" ,"),
            "{out}"
        );
        assert!(out.contains("struct r#on_order { }"), "{out}");
    }

    #[test]
    fn goal_and_transition_constructors() {
        let out = expand(
            HandlerKind::Goal,
            quote!("research.goal", agent = "planner"),
            quote!(
                async fn research(g: GoalContext<Research>) {}
            ),
        );
        assert!(
            out.contains(
                "Handler :: on_goal :: < _ , Research , () > (\"research.goal\" , research)"
            ),
            "{out}"
        );
        let out = expand(
            HandlerKind::Transition,
            quote!(agent = "planner"),
            quote!(
                async fn advance(plan: PlanContext, s: State<Db>) {}
            ),
        );
        assert!(
            out.contains("Handler :: on_transition :: < _ , (State < Db > ,) > (advance)"),
            "{out}"
        );
        assert!(out.contains("Option :: Some (\"planner\")"), "{out}");
    }

    #[test]
    fn task_and_result_constructors() {
        let out = expand(
            HandlerKind::Task,
            quote!("t"),
            quote!(
                async fn t(t: TaskContext<A>) {}
            ),
        );
        assert!(
            out.contains("Handler :: on_task :: < _ , A , _ , () > (\"t\" , t)"),
            "{out}"
        );
        let out = expand(
            HandlerKind::Result,
            quote!("a"),
            quote!(
                async fn r(r: ResultContext) {}
            ),
        );
        assert!(
            out.contains("Handler :: on_result :: < _ , _ , () > (\"a\" , r)"),
            "{out}"
        );
    }

    #[test]
    fn stacked_attributes_make_one_handler_set() {
        let out = expand(
            HandlerKind::Result,
            quote!("a"),
            quote! {
                #[on_result("b")]
                #[inline]
                #[soorma::on_result(event = "c", agent = "x")]
                async fn collect(r: ResultContext<A>) {}
            },
        );
        assert!(
            out.starts_with("# [inline] async fn collect"),
            "the soorma attributes are stripped, others kept: {out}"
        );
        assert_eq!(out.matches("struct collect").count(), 1, "{out}");
        assert_eq!(
            out.matches("impl :: soorma :: __private :: HandlerSet")
                .count(),
            1
        );
        for (i, event) in ["a", "b", "c"].iter().enumerate() {
            assert!(
                out.contains(&format!(
                    "fn __soorma_handler_{i} () -> :: soorma :: __private :: Handler {{ :: soorma :: __private :: Handler :: on_result :: < _ , A , () > (\"{event}\" , collect) }}"
                )),
                "{out}"
            );
        }
        assert_eq!(out.matches("inventory :: submit").count(), 3, "{out}");
        assert_eq!(out.matches(". handler ()").count(), 3, "{out}");
    }

    #[test]
    fn renamed_crate() {
        let out = expand(
            HandlerKind::Invoke,
            quote!(crate = "sdk"),
            quote!(
                async fn calc(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
                    todo!()
                }
            ),
        );
        assert!(!out.contains(":: soorma"), "{out}");
        assert!(
            out.contains(
                "sdk :: __private :: Handler :: invoke :: < _ , sdk :: __private :: RequestType < Calculate > , () >"
            ),
            "{out}"
        );
        assert!(
            out.contains("sdk :: __private :: inventory :: submit"),
            "{out}"
        );
        assert!(
            out.contains("impl sdk :: __private :: HandlerSet for calc"),
            "{out}"
        );
    }
}
