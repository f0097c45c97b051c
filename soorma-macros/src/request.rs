//! `#[derive(Request)]`: parse the `#[request(..)]` attribute into a [`RequestModel`], then
//! generate `impl Request`.

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Data, DeriveInput, Expr, GenericParam, Ident, LitStr, Meta, Path, Token, Type};

use crate::parse::{backtick_list, lit_str, validate_event_name};

/// The keys `#[request(..)]` accepts, in the order diagnostics list them.
const KEYS: [&str; 4] = ["event", "reply", "reply_event", "crate"];

/// An example attribute, for diagnostics.
const EXAMPLE: &str = "`#[request(event = \"calculate.requested\", reply = Calculated)]`";

/// A validated `#[derive(Request)]`.
struct RequestModel {
    input: DeriveInput,
    event: LitStr,
    reply: Type,
    reply_event: Option<LitStr>,
    krate: Option<Path>,
}

/// One `key = value` of `#[request(..)]`.
struct RawArg {
    key: Ident,
    value: RawValue,
}

enum RawValue {
    /// `reply = Type`.
    Type(Type),
    /// Any other key's value (which must be a string literal).
    Expr(Expr),
}

impl RawArg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let usage = format!(
            "expected `key = value`; `#[request]` takes {}, e.g. {EXAMPLE}",
            backtick_list(&KEYS)
        );
        if !input.peek(Ident::peek_any) || !input.peek2(Token![=]) {
            return Err(input.error(usage));
        }
        let key = Ident::parse_any(input)?;
        input.parse::<Token![=]>()?;
        let value = if key == "reply" && !input.peek(syn::Lit) {
            RawValue::Type(input.parse()?)
        } else {
            RawValue::Expr(input.parse()?)
        };
        Ok(RawArg { key, value })
    }
}

/// Expands `#[derive(Request)]`.
pub(crate) fn derive(input: TokenStream) -> TokenStream {
    match syn::parse2::<DeriveInput>(input).and_then(parse) {
        Ok(model) => generate(&model),
        Err(error) => error.to_compile_error(),
    }
}

/// Accumulates errors, reported together.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(existing) => existing.combine(error),
            None => self.0 = Some(error),
        }
    }
}

fn parse(input: DeriveInput) -> syn::Result<RequestModel> {
    let mut errors = Errors::default();
    if let Data::Union(union) = &input.data {
        errors.push(syn::Error::new(
            union.union_token.span,
            "`#[derive(Request)]` supports structs and enums (a request is serialized); \
             found a union",
        ));
    }
    for param in &input.generics.params {
        if let GenericParam::Lifetime(lifetime) = param {
            errors.push(syn::Error::new_spanned(
                lifetime,
                format!(
                    "a request type owns its data (it is deserialized from the event and must be \
                     `'static`): remove the lifetime `{}`",
                    lifetime.lifetime
                ),
            ));
        }
    }

    let mut event: Option<LitStr> = None;
    let mut reply: Option<Type> = None;
    let mut reply_event: Option<LitStr> = None;
    let mut krate: Option<Path> = None;
    let mut seen: Vec<String> = Vec::new();
    let mut attr_span: Option<TokenStream> = None;
    let mut had_invalid = false;

    for attr in input.attrs.iter().filter(|a| a.path().is_ident("request")) {
        let tokens = match &attr.meta {
            Meta::List(list) => list.tokens.clone(),
            other => {
                errors.push(syn::Error::new_spanned(
                    other,
                    format!("expected the arguments in parentheses: {EXAMPLE}"),
                ));
                had_invalid = true;
                continue;
            }
        };
        attr_span.get_or_insert_with(|| attr.to_token_stream());
        let parser = Punctuated::<RawArg, Token![,]>::parse_terminated_with;
        let args = match (|input: ParseStream<'_>| parser(input, RawArg::parse)).parse2(tokens) {
            Ok(args) => args,
            Err(error) => {
                errors.push(error);
                had_invalid = true;
                continue;
            }
        };
        for RawArg { key, value } in args {
            let key_str = key.unraw().to_string();
            if !KEYS.contains(&key_str.as_str()) {
                errors.push(syn::Error::new(
                    key.span(),
                    format!(
                        "unknown key `{key_str}` in `#[request]`; expected one of: {}",
                        backtick_list(&KEYS)
                    ),
                ));
                had_invalid = true;
                continue;
            }
            if seen.contains(&key_str) {
                errors.push(syn::Error::new(
                    key.span(),
                    format!("duplicate key `{key_str}` in `#[request]`"),
                ));
                had_invalid = true;
                continue;
            }
            seen.push(key_str.clone());
            let key = key_str.as_str();
            match value {
                // Only `reply` is parsed as a type.
                RawValue::Type(ty) => reply = Some(ty),
                RawValue::Expr(expr) if key == "reply" => {
                    let hint = lit_str(&expr).map_or_else(
                        || "e.g. `reply = Calculated`".to_owned(),
                        |lit| format!("write `reply = {}`", lit.value()),
                    );
                    errors.push(syn::Error::new_spanned(
                        expr,
                        format!("`reply` is the reply's type, not a string: {hint}"),
                    ));
                    had_invalid = true;
                }
                RawValue::Expr(expr) => match lit_str(&expr) {
                    Some(lit) => match key {
                        "event" | "reply_event" => {
                            if let Err(message) = validate_event_name(
                                &lit.value(),
                                "a request type",
                                if key == "event" {
                                    "\"calculate.requested\""
                                } else {
                                    "\"calculate.completed\""
                                },
                                false,
                            ) {
                                errors.push(syn::Error::new(lit.span(), message));
                                had_invalid = true;
                            }
                            if key == "event" {
                                event = Some(lit);
                            } else {
                                reply_event = Some(lit);
                            }
                        }
                        _ => match lit.parse::<Path>() {
                            Ok(path) => krate = Some(path),
                            Err(_) => {
                                errors.push(syn::Error::new(
                                    lit.span(),
                                    format!(
                                        "`crate` must be the path of the soorma crate, e.g. \
                                         `crate = \"sdk\"` for `sdk = {{ package = \"soorma\", .. }}`; \
                                         found `{}`",
                                        lit.value()
                                    ),
                                ));
                                had_invalid = true;
                            }
                        },
                    },
                    None => {
                        let example = match key {
                            "event" => "event = \"calculate.requested\"",
                            "reply_event" => "reply_event = \"calculate.completed\"",
                            _ => "crate = \"sdk\"",
                        };
                        errors.push(syn::Error::new_spanned(
                            expr,
                            format!("`{key}` must be a string literal, e.g. `{example}`"),
                        ));
                        had_invalid = true;
                    }
                },
            }
        }
    }

    if !had_invalid {
        let missing: Vec<&str> = [("event", event.is_none()), ("reply", reply.is_none())]
            .into_iter()
            .filter_map(|(key, missing)| missing.then_some(key))
            .collect();
        if !missing.is_empty() {
            let message = match (&attr_span, missing.as_slice()) {
                (None, _) => format!(
                    "`#[derive(Request)]` needs the request's event and reply type: add {EXAMPLE}"
                ),
                (Some(_), ["event"]) => format!(
                    "`#[request]` needs the event the request is published as, e.g. \
                     `event = \"calculate.requested\"`: {EXAMPLE}"
                ),
                (Some(_), ["reply"]) => format!(
                    "`#[request]` needs the reply type, e.g. `reply = Calculated` (`reply = ()` \
                     for none): {EXAMPLE}"
                ),
                (Some(_), _) => format!("`#[request]` needs `event` and `reply`: {EXAMPLE}"),
            };
            errors.push(match &attr_span {
                Some(tokens) => syn::Error::new_spanned(tokens, message),
                None => syn::Error::new(input.ident.span(), message),
            });
        }
    }

    if let Some(error) = errors.0 {
        return Err(error);
    }
    match (event, reply) {
        (Some(event), Some(reply)) => Ok(RequestModel {
            input,
            event,
            reply,
            reply_event,
            krate,
        }),
        _ => Err(syn::Error::new(
            Span::call_site(),
            "internal error in soorma-macros",
        )),
    }
}

fn generate(model: &RequestModel) -> TokenStream {
    let RequestModel {
        input,
        event,
        reply,
        reply_event,
        krate,
    } = model;
    let ident = &input.ident;
    let krate = match krate {
        Some(path) => path.to_token_stream(),
        None => quote!(::soorma),
    };
    let private = quote!(#krate::__private);
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();

    // A generic request is a request for the instantiations that serialize: say so, so the
    // impl does not require it of every instantiation.
    let mut predicates: Vec<TokenStream> = where_clause
        .map(|w| w.predicates.iter().map(ToTokens::to_token_stream).collect())
        .unwrap_or_default();
    if !input.generics.params.is_empty() {
        predicates.push(quote! {
            #ident #ty_generics: #private::serde::Serialize
                + #private::serde::de::DeserializeOwned
                + #private::schemars::JsonSchema
                + ::core::marker::Send + ::core::marker::Sync + 'static
        });
        predicates.push(quote! {
            #reply: #private::serde::Serialize
                + #private::serde::de::DeserializeOwned
                + #private::schemars::JsonSchema
                + ::core::marker::Send + 'static
        });
    }
    // A concrete request: the derives it needs are checked once, at its name, with a message
    // that names them (`assert_request_payload`); the impl states them as a higher-ranked
    // (so not checked where the impl is written) bound, so that a missing one is not
    // reported a second time, through `Request`'s supertraits, in rustc's words.
    let check = input.generics.params.is_empty().then(|| {
        predicates.push(quote!(for<'__soorma> Self: #private::RequestPayload));
        let assert = quote_spanned!(ident.span()=> #private::assert_request_payload::<#ident>);
        quote! {
            const _: () = #assert();
        }
    });
    let where_clause = (!predicates.is_empty()).then(|| quote!(where #(#predicates),*));

    // Spanned on the type's name: a missing `Serialize` / `Deserialize` / `JsonSchema` is
    // reported there.
    let trait_path = quote_spanned!(ident.span()=> #private::Request);
    let reply_event = reply_event.as_ref().map(|lit| {
        quote! {
            fn reply_event() -> ::std::borrow::Cow<'static, str> {
                ::std::borrow::Cow::Borrowed(#lit)
            }
        }
    });
    quote! {
        #[doc(hidden)]
        const _: () = {
            #check
            #[automatically_derived]
            impl #impl_generics #trait_path for #ident #ty_generics #where_clause {
                const EVENT: &'static str = #event;
                type Reply = #reply;
                #reply_event
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(input: TokenStream) -> Result<String, Vec<String>> {
        syn::parse2::<DeriveInput>(input)
            .and_then(parse)
            .map(|model| generate(&model).to_string())
            .map_err(|e| e.into_iter().map(|e| e.to_string()).collect())
    }

    fn error(input: TokenStream) -> String {
        let errors = expand(input).expect_err("expected an error");
        assert_eq!(errors.len(), 1, "{errors:#?}");
        errors.into_iter().next().unwrap_or_default()
    }

    #[test]
    fn struct_and_enum() {
        let out = expand(quote! {
            #[request(event = "sentiment.analyze", reply = Sentiment)]
            struct Analyze { text: String }
        })
        .unwrap();
        assert_eq!(
            out,
            "# [doc (hidden)] const _ : () = { const _ : () = :: soorma :: __private :: assert_request_payload :: < Analyze > () ; # [automatically_derived] impl :: soorma :: __private :: Request for Analyze where for < '__soorma > Self : :: soorma :: __private :: RequestPayload { const EVENT : & 'static str = \"sentiment.analyze\" ; type Reply = Sentiment ; } } ;"
        );
        let out = expand(quote! {
            #[derive(Serialize)]
            #[request(event = "cmd", reply = Vec<String>, reply_event = "cmd.done", crate = "sdk")]
            enum Command { Start, Stop }
        })
        .unwrap();
        assert!(
            out.contains("impl sdk :: __private :: Request for Command"),
            "{out}"
        );
        assert!(out.contains("type Reply = Vec < String > ;"), "{out}");
        assert!(
            out.contains(
                "fn reply_event () -> :: std :: borrow :: Cow < 'static , str > { :: std :: borrow :: Cow :: Borrowed (\"cmd.done\") }"
            ),
            "{out}"
        );
    }

    #[test]
    fn generics_get_bounds() {
        let out = expand(quote! {
            #[request(event = "page.requested", reply = Vec<T>)]
            struct Page<T, const N: usize> where T: Clone { items: [T; N] }
        })
        .unwrap();
        assert!(
            out.contains(
                "impl < T , const N : usize > :: soorma :: __private :: Request for Page < T , N > where T : Clone , Page < T , N > : :: soorma :: __private :: serde :: Serialize"
            ),
            "{out}"
        );
        assert!(
            out.contains("Vec < T > : :: soorma :: __private :: serde :: Serialize"),
            "{out}"
        );
    }

    #[test]
    fn split_attributes() {
        expand(quote! {
            #[request(event = "a.requested")]
            #[request(reply = ())]
            struct A;
        })
        .unwrap();
    }

    #[test]
    fn missing_attribute_or_keys() {
        assert_eq!(
            error(quote!(
                struct A;
            )),
            "`#[derive(Request)]` needs the request's event and reply type: add `#[request(event = \"calculate.requested\", reply = Calculated)]`"
        );
        assert_eq!(
            error(quote!(
                #[request(reply = B)]
                struct A;
            )),
            "`#[request]` needs the event the request is published as, e.g. `event = \"calculate.requested\"`: `#[request(event = \"calculate.requested\", reply = Calculated)]`"
        );
        assert_eq!(
            error(quote!(
                #[request(event = "a")]
                struct A;
            )),
            "`#[request]` needs the reply type, e.g. `reply = Calculated` (`reply = ()` for none): `#[request(event = \"calculate.requested\", reply = Calculated)]`"
        );
        assert_eq!(
            error(quote!(
                #[request()]
                struct A;
            )),
            "`#[request]` needs `event` and `reply`: `#[request(event = \"calculate.requested\", reply = Calculated)]`"
        );
    }

    #[test]
    fn unknown_duplicate_and_malformed_keys() {
        assert_eq!(
            error(quote!(
                #[request(event = "a", reply = B, name = "x")]
                struct A;
            )),
            "unknown key `name` in `#[request]`; expected one of: `event`, `reply`, `reply_event`, `crate`"
        );
        assert_eq!(
            error(quote!(
                #[request(event = "a", reply = B, event = "b")]
                struct A;
            )),
            "duplicate key `event` in `#[request]`"
        );
        assert_eq!(
            error(quote!(
                #[request("a", reply = B)]
                struct A;
            )),
            "expected `key = value`; `#[request]` takes `event`, `reply`, `reply_event`, `crate`, e.g. `#[request(event = \"calculate.requested\", reply = Calculated)]`"
        );
        assert_eq!(
            error(quote!(
                #[request = "a"]
                struct A;
            )),
            "expected the arguments in parentheses: `#[request(event = \"calculate.requested\", reply = Calculated)]`"
        );
    }

    #[test]
    fn invalid_values() {
        assert_eq!(
            error(quote!(
                #[request(event = "a b", reply = B)]
                struct A;
            )),
            "invalid character ' ' in event name `a b`; use only ASCII letters, digits, `.`, `-` and `_`"
        );
        assert_eq!(
            error(quote!(
                #[request(event = "*", reply = B)]
                struct A;
            )),
            "`\"*\"` (all events) is only allowed in `#[on_event]`; a request type needs a concrete event name, e.g. `\"calculate.requested\"`"
        );
        assert_eq!(
            error(quote!(
                #[request(event = "a", reply = B, reply_event = "a..b")]
                struct A;
            )),
            "event name `a..b` must not contain `..`; use dot-separated non-empty segments, e.g. `\"calculate.completed\"`"
        );
        assert_eq!(
            error(quote!(
                #[request(event = a, reply = B)]
                struct A;
            )),
            "`event` must be a string literal, e.g. `event = \"calculate.requested\"`"
        );
        assert_eq!(
            error(quote!(
                #[request(event = "a", reply = "B")]
                struct A;
            )),
            "`reply` is the reply's type, not a string: write `reply = B`"
        );
        assert_eq!(
            error(quote!(
                #[request(event = "a", reply = B, crate = "not a path")]
                struct A;
            )),
            "`crate` must be the path of the soorma crate, e.g. `crate = \"sdk\"` for `sdk = { package = \"soorma\", .. }`; found `not a path`"
        );
    }

    #[test]
    fn unions_and_lifetimes() {
        assert_eq!(
            error(quote!(#[request(event = "a", reply = B)] union U { a: u8 })),
            "`#[derive(Request)]` supports structs and enums (a request is serialized); found a union"
        );
        assert_eq!(
            error(quote!(
                #[request(event = "a", reply = B)]
                struct A<'a> {
                    s: &'a str,
                }
            )),
            "a request type owns its data (it is deserialized from the event and must be `'static`): remove the lifetime `'a`"
        );
    }
}
