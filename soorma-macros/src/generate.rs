//! Code generation: [`HandlerModel`] → tokens.
//!
//! The output is the user's function, unchanged, followed by an anonymous
//! `const` block that builds the `Handler` and submits a
//! `HandlerRegistration` to `inventory`. Everything is referenced through
//! `::soorma::__private` with fully qualified paths, so users need no extra
//! dependencies or imports.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::LitStr;
use syn::ext::IdentExt;

use syn::spanned::Spanned;
use syn::{FnArg, GenericArgument, PathArguments, ReturnType, Type};

use crate::model::{HandlerKind, HandlerModel};

/// Generates the original function plus its handler registration.
pub(crate) fn generate(model: &HandlerModel) -> TokenStream {
    let HandlerModel {
        kind,
        topic,
        event,
        event_lit,
        agent,
        description,
        name,
        fn_ident,
        item_fn,
    } = model;

    // Spanned on the user's function so that trait-bound failures (wrong
    // payload type, non-`Send` future, bad return type, ...) point at it.
    let span = fn_ident.span();
    let constructor = format_ident!("{}", kind.attr_name(), span = span);
    let event = LitStr::new(event, event_lit.span());
    let topic_arg = topic.as_ref().map(|topic| {
        // Spanned on the topic literal: a mismatch with the runtime's
        // `Topic` enum points there.
        let variant = &topic.variant;
        quote_spanned!(topic.lit.span()=> ::soorma::__private::Topic::#variant,)
    });
    let handler = if *kind == HandlerKind::Transition {
        quote_spanned! {span=> ::soorma::__private::Handler::#constructor(#fn_ident) }
    } else {
        quote_spanned! {span=>
            ::soorma::__private::Handler::#constructor(#topic_arg #event, #fn_ident)
        }
    };

    let with_description = (!description.is_empty()).then(|| {
        let description = LitStr::new(description, Span::call_site());
        quote!(.with_description(#description))
    });
    let with_name = name.as_ref().map(|name| quote!(.with_name(#name)));

    let agent = match agent {
        Some(agent) => quote!(::core::option::Option::Some(#agent)),
        None => quote!(::core::option::Option::None),
    };
    let fn_name = LitStr::new(&fn_ident.unraw().to_string(), span);
    let checks = type_checks(model);

    quote! {
        #item_fn

        #[doc(hidden)]
        const _: () = {
            #checks
            fn __soorma_handler() -> ::soorma::__private::Handler {
                #handler
                    #with_description
                    #with_name
            }
            ::soorma::__private::inventory::submit! {
                ::soorma::__private::HandlerRegistration::new(
                    #agent,
                    #fn_name,
                    __soorma_handler,
                )
            }
        };
    }
}

/// The first generic type argument of a path type's last segment (`T` in `Invocation<T>`),
/// and the second (`E` in `Result<T, E>`).
fn generic_types(ty: &Type) -> Vec<&Type> {
    let Type::Path(path) = ty else {
        return Vec::new();
    };
    let Some(last) = path.path.segments.last() else {
        return Vec::new();
    };
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return Vec::new();
    };
    args.args
        .iter()
        .filter_map(|a| match a {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// Compile-time assertions spanned on the user's types, so a payload, reply or extractor type
/// that lacks a required trait is reported at that type rather than at the function name.
fn type_checks(model: &HandlerModel) -> TokenStream {
    let mut asserts = Vec::new();
    let mut args = model.item_fn.sig.inputs.iter().filter_map(|a| match a {
        FnArg::Typed(t) => Some(&*t.ty),
        FnArg::Receiver(_) => None,
    });
    if let Some(payload) = args
        .next()
        .and_then(|context| generic_types(context).first().copied())
    {
        asserts.push(quote_spanned! {payload.span()=>
            __soorma_payload::<#payload>();
        });
    }
    for extractor in args {
        asserts.push(quote_spanned! {extractor.span()=>
            __soorma_extractor::<#extractor>();
        });
    }
    if model.kind == HandlerKind::Invoke
        && let ReturnType::Type(_, ret) = &model.item_fn.sig.output
    {
        let types = generic_types(ret);
        if let Some(ok) = types.first() {
            asserts.push(quote_spanned! {ok.span()=> __soorma_reply::<#ok>(); });
        }
        if let Some(err) = types.get(1) {
            asserts.push(quote_spanned! {err.span()=> __soorma_error::<#err>(); });
        }
    }
    quote! {
        #[allow(dead_code, clippy::extra_unused_type_parameters)]
        fn __soorma_type_checks() {
            fn __soorma_payload<
                T: ::soorma::__private::serde::de::DeserializeOwned + ::soorma::__private::schemars::JsonSchema,
            >() {}
            fn __soorma_reply<T: ::soorma::__private::serde::Serialize + ::soorma::__private::schemars::JsonSchema>() {}
            fn __soorma_error<E: ::core::fmt::Display>() {}
            fn __soorma_extractor<X: ::soorma::__private::FromHandlerInput>() {}
            #(#asserts)*
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::HandlerKind;
    use crate::parse::parse_handler;

    fn expand(kind: HandlerKind, args: TokenStream, item: TokenStream) -> String {
        let model = parse_handler(kind, args, item).expect("valid handler");
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
        assert!(out.contains("Handler :: on_invoke"), "{out}");
        assert!(
            out.contains(
                ":: soorma :: __private :: Handler :: on_invoke (\"calculate.requested\" , calculate) \
                 . with_description (\"Evaluates an arithmetic expression.\") \
                 . with_name (\"calculate\")"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                ":: soorma :: __private :: HandlerRegistration :: new (:: core :: option :: Option :: Some (\"calculator\") , \"calculate\" , __soorma_handler ,)"
            ),
            "{out}"
        );
        // The function itself is re-emitted, doc comment included.
        assert!(
            out.starts_with("# [doc =")
                && out.contains(" Evaluates an arithmetic expression.\"] async fn calculate (req"),
            "{out}"
        );
        assert!(out.contains("# [doc (hidden)] const _ : () ="), "{out}");
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
                ":: soorma :: __private :: Handler :: on_event (:: soorma :: __private :: Topic :: BusinessFacts , \"order.placed\" , r#on_order)"
            ),
            "{out}"
        );
        assert!(!out.contains("with_description"), "{out}");
        assert!(!out.contains("with_name"), "{out}");
        assert!(
            out.contains("new (:: core :: option :: Option :: None , \"on_order\" ,"),
            "{out}"
        );
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
            out.contains("Handler :: on_goal (\"research.goal\" , research)"),
            "{out}"
        );
        let out = expand(
            HandlerKind::Transition,
            quote!(agent = "planner"),
            quote!(
                async fn advance(plan: PlanContext) {}
            ),
        );
        assert!(out.contains("Handler :: on_transition (advance)"), "{out}");
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
        assert!(out.contains("Handler :: on_task (\"t\" , t)"), "{out}");
        let out = expand(
            HandlerKind::Result,
            quote!("a"),
            quote! {
                #[on_result("b")]
                async fn collect(r: ResultContext<A>) {}
            },
        );
        assert!(
            out.contains("Handler :: on_result (\"a\" , collect)"),
            "{out}"
        );
        // The other (stacked) attribute is kept for its own expansion.
        assert!(
            out.starts_with("# [on_result (\"b\")] async fn collect"),
            "{out}"
        );
    }
}
