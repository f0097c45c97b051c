//! Parsing and validation: attribute arguments + `syn::ItemFn` → [`FnModel`].
//!
//! Works purely on `proc_macro2` types so that it can be unit-tested. All
//! problems are collected (with [`syn::Error::combine`]) and reported at once.
//!
//! The outermost soorma attribute on a function expands all of them: it finds the others
//! among the function's attributes (by the last segment of their path), validates each, and
//! strips them from the function it re-emits, so that one function gets one handler set.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, FnArg, GenericArgument, Ident, ItemFn, Lit, LitStr, Meta, Path, PathArguments,
    ReturnType, Signature, Token, Type,
};

use crate::model::{
    FnModel, HandlerKind, HandlerModel, MAX_FAN_IN, SignatureModel, TOPICS, TopicModel,
};

/// Why an expansion failed: the errors, and the function (without its soorma attributes)
/// when the item was one.
pub(crate) struct Failure {
    pub(crate) error: syn::Error,
    pub(crate) item_fn: Option<Box<ItemFn>>,
}

/// One soorma attribute to expand: its kind, the tokens inside its parentheses, and the span
/// "missing argument" errors point at when it has no arguments.
struct AttrInput {
    kind: HandlerKind,
    args: TokenStream,
    span: Span,
}

/// Parses and validates the soorma attribute `kind(args)` applied to `item`, together with
/// the soorma attributes stacked below it on the same function.
pub(crate) fn parse_fn(
    kind: HandlerKind,
    args: TokenStream,
    item: TokenStream,
) -> Result<FnModel, Failure> {
    let mut errors = Errors::default();

    let Ok(mut item_fn) = syn::parse2::<ItemFn>(item) else {
        return Err(Failure {
            error: syn::Error::new(
                Span::call_site(),
                format!(
                    "{} can only be applied to an `async fn`, e.g. `async fn handler({}) {{ ... }}`",
                    kind.attr(),
                    kind.context_example()
                ),
            ),
            item_fn: None,
        });
    };

    let mut inputs = vec![AttrInput {
        kind,
        args,
        span: Span::call_site(),
    }];
    inputs.extend(take_stacked(&mut item_fn, &mut errors));

    let mut handlers = Vec::new();
    for input in inputs {
        let args = parse_args(input.kind, &input.args, input.span, &mut errors);
        let typed = input.kind.typed_constructor().is_some()
            && args.as_ref().is_some_and(|a| a.event.is_none());
        let sig = validate_signature(input.kind, typed, &item_fn.sig, &mut errors);
        if let (Some(args), Some(sig)) = (args, sig) {
            if let Some(value) = &sig.value
                && let Some(error) = replies_arity_error(&args.requests, value)
            {
                errors.push(error);
                continue;
            }
            let description = match &args.description {
                Some(lit) => lit.value().trim().to_owned(),
                None => doc_description(&item_fn.attrs),
            };
            handlers.push(HandlerModel {
                kind: input.kind,
                topic: args.topic,
                event: args.event,
                requests: args.requests,
                agent: args.agent,
                description,
                name: args.name,
                krate: args.krate,
                sig,
            });
        }
    }

    match errors.finish() {
        Ok(()) => Ok(FnModel { item_fn, handlers }),
        Err(error) => Err(Failure {
            error,
            item_fn: Some(Box::new(item_fn)),
        }),
    }
}

/// The `crate = "..."` among an attribute's arguments, if it is a valid path, whatever else
/// is wrong with them (for the handler set emitted next to errors).
pub(crate) fn find_crate(args: &TokenStream) -> Option<Path> {
    let trees: Vec<TokenTree> = args.clone().into_iter().collect();
    trees.windows(3).find_map(|w| match w {
        [
            TokenTree::Ident(key),
            TokenTree::Punct(eq),
            TokenTree::Literal(lit),
        ] if key == "crate" && eq.as_char() == '=' => {
            syn::parse2::<LitStr>(TokenTree::Literal(lit.clone()).into())
                .ok()?
                .parse()
                .ok()
        }
        _ => None,
    })
}

/// Removes the soorma attributes below the one being expanded from `item_fn`, returning them
/// in order. An attribute is one of soorma's if the last segment of its path is a handler
/// attribute's name (`on_result`, `soorma::on_result`, `sdk::on_result`).
fn take_stacked(item_fn: &mut ItemFn, errors: &mut Errors) -> Vec<AttrInput> {
    let mut stacked = Vec::new();
    let mut kept = Vec::new();
    for attr in std::mem::take(&mut item_fn.attrs) {
        let Some(last) = attr.path().segments.last() else {
            kept.push(attr);
            continue;
        };
        let Some(kind) = HandlerKind::from_attr_name(&last.ident.unraw().to_string()) else {
            kept.push(attr);
            continue;
        };
        let span = last.ident.span();
        match attr.meta {
            Meta::Path(_) => stacked.push(AttrInput {
                kind,
                args: TokenStream::new(),
                span,
            }),
            Meta::List(list) => stacked.push(AttrInput {
                kind,
                args: list.tokens,
                span,
            }),
            Meta::NameValue(nv) => errors.push(syn::Error::new_spanned(
                &nv.value,
                format!(
                    "{} takes its arguments in parentheses, e.g. {}",
                    kind.attr(),
                    kind.example_attr()
                ),
            )),
        }
    }
    item_fn.attrs = kept;
    stacked
}

/// Accumulates errors so that all of them are reported in one pass; an error whose message
/// was already reported (the same signature problem seen by two stacked attributes) is
/// reported once.
#[derive(Default)]
struct Errors {
    error: Option<syn::Error>,
    seen: Vec<String>,
}

impl Errors {
    fn push(&mut self, error: syn::Error) {
        let message = error.to_string();
        if self.seen.contains(&message) {
            return;
        }
        self.seen.push(message);
        match &mut self.error {
            Some(existing) => existing.combine(error),
            None => self.error = Some(error),
        }
    }

    fn finish(self) -> syn::Result<()> {
        match self.error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

// ---------------------------------------------------------------------------
// Attribute arguments
// ---------------------------------------------------------------------------

/// One comma-separated attribute argument, before validation.
enum RawArg {
    /// `"value"` (or, erroneously, any other expression).
    Positional(Expr),
    /// A type (the positional arguments of `#[on_fan_in]`).
    Type(Type),
    /// `key = value`.
    Named { key: Ident, value: Expr },
}

impl RawArg {
    /// Parses one argument; positional arguments are types for `#[on_fan_in]`, expressions
    /// (string literals, validated later) otherwise.
    fn parse(kind: HandlerKind, input: ParseStream<'_>) -> syn::Result<Self> {
        if input.peek(Ident::peek_any) && input.peek2(Token![=]) && !input.peek2(Token![==]) {
            let key = Ident::parse_any(input)?;
            input.parse::<Token![=]>()?;
            let value = input.parse()?;
            Ok(RawArg::Named { key, value })
        } else if kind == HandlerKind::FanIn && !input.peek(syn::Lit) {
            Ok(RawArg::Type(input.parse()?))
        } else {
            Ok(RawArg::Positional(input.parse()?))
        }
    }
}

/// Validated attribute arguments.
struct Args {
    topic: Option<TopicModel>,
    event: Option<LitStr>,
    requests: Vec<Type>,
    agent: Option<LitStr>,
    description: Option<LitStr>,
    name: Option<LitStr>,
    krate: Option<Path>,
}

/// Parses and validates the attribute arguments. Returns `None` if they are not
/// syntactically `arg, arg, ...` or something required is missing or invalid (the error is
/// recorded).
fn parse_args(
    kind: HandlerKind,
    tokens: &TokenStream,
    attr_span: Span,
    errors: &mut Errors,
) -> Option<Args> {
    let parse_arg: fn(ParseStream<'_>) -> syn::Result<RawArg> = if kind == HandlerKind::FanIn {
        |input| RawArg::parse(HandlerKind::FanIn, input)
    } else {
        |input| RawArg::parse(HandlerKind::Event, input)
    };
    let parser = |input: ParseStream<'_>| {
        Punctuated::<RawArg, Token![,]>::parse_terminated_with(input, parse_arg)
    };
    let raw = match parser.parse2(tokens.clone()) {
        Ok(raw) => raw,
        Err(error) => {
            errors.push(error);
            return None;
        }
    };

    let mut positional: Vec<LitStr> = Vec::new();
    let mut requests: Vec<Type> = Vec::new();
    let mut named: Vec<(Ident, LitStr)> = Vec::new();
    // Keys seen so far (for duplicates), and whether some argument was given
    // but invalid: then "missing" errors would only be noise.
    let mut seen: Vec<String> = Vec::new();
    let mut had_invalid = false;
    let mut ok = true;

    for arg in raw {
        match arg {
            RawArg::Type(ty) => requests.push(ty),
            RawArg::Positional(expr) if kind == HandlerKind::FanIn => {
                had_invalid = true;
                errors.push(syn::Error::new_spanned(
                    &expr,
                    "`#[on_fan_in]` takes the request types whose replies it collects, not \
                     event names, e.g. `#[on_fan_in(Search, Summarize)]`",
                ));
            }
            RawArg::Positional(expr) => match lit_str(&expr) {
                Some(lit) => positional.push(lit),
                None => {
                    had_invalid = true;
                    errors.push(syn::Error::new_spanned(
                        &expr,
                        format!("expected a string literal; {}", positional_usage(kind)),
                    ));
                }
            },
            RawArg::Named { key, value } => {
                let key_str = key.unraw().to_string();
                if !kind.allowed_args().contains(&key_str.as_str()) {
                    errors.push(syn::Error::new(
                        key.span(),
                        unknown_arg_message(kind, &key_str),
                    ));
                    ok = false;
                    continue;
                }
                if seen.contains(&key_str) {
                    errors.push(syn::Error::new(
                        key.span(),
                        format!("duplicate argument `{key_str}` for {}", kind.attr()),
                    ));
                    ok = false;
                    continue;
                }
                seen.push(key_str.clone());
                match lit_str(&value) {
                    Some(lit) => named.push((Ident::new(&key_str, key.span()), lit)),
                    None => {
                        had_invalid = true;
                        errors.push(syn::Error::new_spanned(
                            &value,
                            format!(
                                "`{key_str}` must be a string literal, e.g. `{key_str} = {}`",
                                named_example(kind, &key_str)
                            ),
                        ));
                    }
                }
            }
        }
    }
    ok &= !had_invalid;

    let take = |key: &str| named.iter().find(|(k, _)| *k == key).cloned();
    let mut topic = take("topic");
    let mut event = take("event");
    let agent = take("agent").map(|(_, lit)| lit);
    let description = take("description").map(|(_, lit)| lit);
    let name = take("name").map(|(_, lit)| lit);
    let krate = take("crate").and_then(|(_, lit)| match lit.parse::<Path>() {
        Ok(path) => Some(path),
        Err(_) => {
            ok = false;
            errors.push(syn::Error::new(
                lit.span(),
                format!(
                    "`crate` must be the path of the soorma crate, e.g. `crate = \"sdk\"` for \
                     `sdk = {{ package = \"soorma\", .. }}`; found `{}`",
                    lit.value()
                ),
            ));
            None
        }
    });

    // Map positional arguments onto `topic` / `event`.
    let mut positional = positional.into_iter();
    match kind {
        HandlerKind::Event => {
            let first = positional.next();
            let second = positional.next();
            for extra in positional {
                ok = false;
                errors.push(syn::Error::new(
                    extra.span(),
                    "unexpected extra positional argument; `#[on_event]` takes at most two \
                     positional arguments (the topic and the event name), e.g. \
                     `#[on_event(\"business-facts\", \"order.placed\")]`",
                ));
            }
            let (pos_topic, pos_event) = match (first, second) {
                (Some(t), Some(e)) => (Some(t), Some(e)),
                (Some(only), None) => {
                    // With one positional, the named arguments decide; failing
                    // that, a known topic string is the topic, anything else
                    // the event name.
                    let is_topic = TOPICS.iter().any(|(s, _)| *s == only.value());
                    let as_topic = if topic.is_some() {
                        false
                    } else if event.is_some() {
                        true
                    } else {
                        is_topic
                    };
                    if as_topic {
                        (Some(only), None)
                    } else {
                        (None, Some(only))
                    }
                }
                _ => (None, None),
            };
            ok &= merge_positional(kind, "topic", &mut topic, pos_topic, errors);
            ok &= merge_positional(kind, "event", &mut event, pos_event, errors);
        }
        HandlerKind::Transition => {
            for extra in positional {
                ok = false;
                errors.push(syn::Error::new(
                    extra.span(),
                    "`#[on_transition]` takes no event name: it receives every event of its \
                     planner's plans; pass `agent = \"...\"` by name",
                ));
            }
        }
        // Positional literals were rejected above.
        HandlerKind::FanIn => {}
        HandlerKind::Invoke | HandlerKind::Task | HandlerKind::Result | HandlerKind::Goal => {
            let pos_event = positional.next();
            for extra in positional {
                ok = false;
                errors.push(syn::Error::new(
                    extra.span(),
                    format!(
                        "unexpected extra positional argument; {} takes one positional argument \
                         (the event name); pass the others by name: {}",
                        kind.attr(),
                        backtick_list(kind.allowed_args())
                    ),
                ));
            }
            ok &= merge_positional(kind, "event", &mut event, pos_event, errors);
        }
    }

    // Topic (on_event only).
    let topic = match (kind, topic) {
        (HandlerKind::Event, None) => {
            ok = false;
            if !had_invalid {
                errors.push(attr_error(
                    tokens,
                    attr_span,
                    format!(
                        "`#[on_event]` needs a topic, e.g. {}; allowed topics: {}",
                        kind.example_attr(),
                        topic_list()
                    ),
                ));
            }
            None
        }
        (_, Some((_, lit))) => match TOPICS.iter().find(|(s, _)| *s == lit.value()) {
            Some((_, variant)) => Some(TopicModel {
                variant: Ident::new(variant, lit.span()),
                lit,
            }),
            None => {
                ok = false;
                errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown topic `{}`; expected one of: {}",
                        lit.value(),
                        topic_list()
                    ),
                ));
                None
            }
        },
        (_, None) => None,
    };

    // Event name.
    let event = match event {
        None if kind.requires_event() => {
            ok = false;
            if !had_invalid {
                errors.push(attr_error(
                    tokens,
                    attr_span,
                    format!(
                        "{} needs an event name, e.g. {}",
                        kind.attr(),
                        kind.example_attr()
                    ),
                ));
            }
            None
        }
        None => None,
        Some((_, lit)) => {
            let who = kind.attr();
            if let Err(message) = validate_event_name(
                &lit.value(),
                &who,
                kind.example_event(),
                kind.allows_wildcard(),
            ) {
                ok = false;
                errors.push(syn::Error::new(lit.span(), message));
            }
            Some(lit)
        }
    };

    // Request types (on_fan_in only).
    if kind == HandlerKind::FanIn {
        if requests.is_empty() && !had_invalid {
            ok = false;
            errors.push(attr_error(
                tokens,
                attr_span,
                "`#[on_fan_in]` needs the request types whose replies it collects, in the \
                 order of the fan-out, e.g. `#[on_fan_in(Search, Summarize)]`"
                    .to_owned(),
            ));
        }
        if requests.len() > 1
            && let Some(batch) = requests
                .iter()
                .find(|r| crate::generate::batch_element(r).is_some())
        {
            ok = false;
            errors.push(syn::Error::new_spanned(
                batch,
                "a batch (`Vec<R>`) is fanned in alone: `#[on_fan_in(Vec<Calculate>)]` takes \
                 the `Vec` of its replies; a fan-out of several types is a tuple of single \
                 requests, e.g. `#[on_fan_in(Search, Summarize)]`",
            ));
        }
        if let Some(extra) = requests.get(MAX_FAN_IN) {
            ok = false;
            errors.push(syn::Error::new_spanned(
                extra,
                format!(
                    "`#[on_fan_in]` collects at most {MAX_FAN_IN} request types; found {}",
                    requests.len()
                ),
            ));
        }
    }

    for (lit, key, example) in [
        (&agent, "agent", "\"calculator\""),
        (&name, "name", "\"calculate\""),
    ] {
        if let Some(lit) = lit
            && lit.value().trim().is_empty()
        {
            ok = false;
            errors.push(syn::Error::new(
                lit.span(),
                format!("`{key}` must not be empty, e.g. `{key} = {example}`"),
            ));
        }
    }

    ok.then_some(Args {
        topic,
        event,
        requests,
        agent,
        description,
        name,
        krate,
    })
}

/// Combines a positional `topic`/`event` with its named form, reporting a
/// duplicate if both are given. Returns whether it succeeded.
fn merge_positional(
    kind: HandlerKind,
    key: &str,
    named: &mut Option<(Ident, LitStr)>,
    positional: Option<LitStr>,
    errors: &mut Errors,
) -> bool {
    let Some(positional) = positional else {
        return true;
    };
    match named {
        Some((ident, _)) => {
            errors.push(syn::Error::new(
                ident.span(),
                format!(
                    "duplicate argument `{key}` for {}: the {} is already given positionally",
                    kind.attr(),
                    if key == "topic" {
                        "topic"
                    } else {
                        "event name"
                    }
                ),
            ));
            false
        }
        None => {
            *named = Some((Ident::new(key, positional.span()), positional));
            true
        }
    }
}

/// An error about the attribute as a whole (e.g. a missing argument): spanned
/// on the arguments if there are any, else on the attribute.
fn attr_error(tokens: &TokenStream, attr_span: Span, message: String) -> syn::Error {
    if tokens.is_empty() {
        syn::Error::new(attr_span, message)
    } else {
        syn::Error::new_spanned(tokens, message)
    }
}

/// The string literal in `expr`, if it is one (looking through invisible
/// groups produced by `macro_rules!`).
pub(crate) fn lit_str(expr: &Expr) -> Option<LitStr> {
    match expr {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit),
            attrs,
        }) if attrs.is_empty() => Some(lit.clone()),
        Expr::Group(group) => lit_str(&group.expr),
        _ => None,
    }
}

pub(crate) fn backtick_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn topic_list() -> String {
    let topics: Vec<&str> = TOPICS.iter().map(|(s, _)| *s).collect();
    backtick_list(&topics)
}

fn positional_usage(kind: HandlerKind) -> String {
    match kind {
        HandlerKind::Event => {
            "the positional arguments of `#[on_event]` are the topic and the event \
                               name, e.g. `#[on_event(\"business-facts\", \"order.placed\")]`"
                .to_owned()
        }
        _ => format!(
            "the positional argument of {} is the event name, e.g. {}",
            kind.attr(),
            kind.example_attr()
        ),
    }
}

fn named_example(kind: HandlerKind, key: &str) -> &'static str {
    match key {
        "topic" => "\"business-facts\"",
        "event" => kind.example_event(),
        "agent" => "\"calculator\"",
        "description" => "\"Evaluates an arithmetic expression.\"",
        "name" => "\"calculate\"",
        "crate" => "\"sdk\"",
        _ => "\"...\"",
    }
}

fn unknown_arg_message(kind: HandlerKind, key: &str) -> String {
    let expected = backtick_list(kind.allowed_args());
    match key {
        "name" => format!(
            "argument `name` is only allowed on `#[on_invoke]`, `#[on_task]` and `#[on_goal]`; {} expects one of: {expected}",
            kind.attr()
        ),
        "topic" => format!(
            "argument `topic` is only allowed on `#[on_event]`; {} expects one of: {expected}",
            kind.attr()
        ),
        "event" if kind == HandlerKind::FanIn => format!(
            "`#[on_fan_in]` takes no event name: name the request types whose replies it \
             collects, e.g. `#[on_fan_in(Search, Summarize)]`; it expects one of: {expected}"
        ),
        _ => format!(
            "unknown argument `{key}` for {}; expected one of: {expected}",
            kind.attr()
        ),
    }
}

/// Checks an event name; on failure returns the diagnostic message. `who` names what needs
/// the name (e.g. ``#[on_invoke]``), `example` is an example name.
pub(crate) fn validate_event_name(
    event: &str,
    who: &str,
    example: &str,
    allows_wildcard: bool,
) -> Result<(), String> {
    const ALLOWED: &str = "ASCII letters, digits, `.`, `-` and `_`";
    if event.is_empty() {
        return Err(format!(
            "event name must not be empty; use {ALLOWED}, e.g. `{example}`"
        ));
    }
    if event == "*" {
        return if allows_wildcard {
            Ok(())
        } else {
            Err(format!(
                "`\"*\"` (all events) is only allowed in `#[on_event]`; {who} needs a concrete event name, e.g. `{example}`"
            ))
        };
    }
    if let Some(bad) = event
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        let wildcard = if allows_wildcard {
            " (or exactly `\"*\"` for all events)"
        } else {
            ""
        };
        return Err(format!(
            "invalid character {bad:?} in event name `{event}`; use only {ALLOWED}{wildcard}"
        ));
    }
    if event.starts_with('.') || event.ends_with('.') {
        return Err(format!(
            "event name `{event}` must not start or end with `.`; use dot-separated segments, e.g. `{example}`"
        ));
    }
    if event.contains("..") {
        return Err(format!(
            "event name `{event}` must not contain `..`; use dot-separated non-empty segments, e.g. `{example}`"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Function signature
// ---------------------------------------------------------------------------

/// Validates the handler's signature for `kind` (`typed`: the event comes from the payload
/// type) and extracts the types the registration needs; `None` if it is invalid.
fn validate_signature(
    kind: HandlerKind,
    typed: bool,
    sig: &Signature,
    errors: &mut Errors,
) -> Option<SignatureModel> {
    let attr = kind.attr();
    let mut ok = true;
    let mut error = |e: syn::Error| {
        ok = false;
        errors.push(e);
    };

    if let Some(token) = &sig.constness {
        error(syn::Error::new(
            token.span,
            format!("{attr} handler must not be `const`; write `async fn`"),
        ));
    }
    if let Some(token) = &sig.unsafety {
        error(syn::Error::new(
            token.span,
            format!("{attr} handler must not be `unsafe`; write a safe `async fn`"),
        ));
    }
    if let Some(abi) = &sig.abi {
        error(syn::Error::new_spanned(
            abi,
            format!("{attr} handler must not be `extern`; write a plain `async fn`"),
        ));
    }
    if sig.asyncness.is_none() {
        error(syn::Error::new(
            sig.fn_token.span,
            format!("{attr} handler must be `async fn`; found `fn`"),
        ));
    }
    if !sig.generics.params.is_empty() {
        error(syn::Error::new_spanned(
            &sig.generics,
            format!("{attr} handler must not have generic parameters; use concrete types"),
        ));
    } else if let Some(where_clause) = &sig.generics.where_clause {
        error(syn::Error::new_spanned(
            where_clause,
            format!("{attr} handler must not have a `where` clause; use concrete types"),
        ));
    }

    let mut typed_args: Vec<&Type> = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => error(syn::Error::new_spanned(
                receiver,
                format!(
                    "{attr} handler must be a free function, not a method; remove the `self` receiver"
                ),
            )),
            FnArg::Typed(pat_type) => {
                if let Type::ImplTrait(_) = strip_groups(&pat_type.ty) {
                    error(syn::Error::new_spanned(
                        &pat_type.ty,
                        format!(
                            "{attr} handler must not take `impl Trait` arguments; use a concrete type"
                        ),
                    ));
                }
                typed_args.push(&pat_type.ty);
            }
        }
    }
    let mut args = typed_args.into_iter();
    let mut payload = None;
    let mut state = None;
    match args.next() {
        None => error(syn::Error::new(
            sig.paren_token.span.join(),
            format!(
                "{attr} handler must take {} `{}` as its first argument",
                article(kind.context_type()),
                kind.context_display()
            ),
        )),
        // An `impl Trait` first argument has already been reported.
        Some(ty) if matches!(strip_groups(ty), Type::ImplTrait(_)) => {}
        Some(ty) => match check_context_type(kind, ty) {
            Err(e) => error(e),
            Ok(()) => {
                let mut generics = type_args(ty).into_iter();
                payload = generics.next().cloned();
                state = generics.next().cloned();
                if payload.is_none() && (typed || kind == HandlerKind::FanIn) {
                    error(syn::Error::new_spanned(ty, untyped_context_message(kind)));
                }
            }
        },
    }

    let value = if kind.takes_value() {
        let value = args.next().cloned();
        if value.is_none() {
            error(syn::Error::new(
                sig.paren_token.span.join(),
                "`#[on_fan_in]` handler takes the task, then the replies (in the order of the \
                 request types), e.g. `async fn collect(task: TaskContext<Research>, \
                 (sentiment, summary): (Sentiment, Summary))`",
            ));
        }
        value
    } else {
        None
    };

    let extractors: Vec<Type> = args.cloned().collect();
    if let Some(extra) = extractors.get(kind.max_extractors()) {
        error(syn::Error::new_spanned(
            extra,
            format!(
                "{attr} handler takes at most {} extractors after its {}; found {}",
                kind.max_extractors(),
                if kind.takes_value() {
                    "task and replies"
                } else {
                    "context"
                },
                extractors.len()
            ),
        ));
    }

    if let Some(variadic) = &sig.variadic {
        error(syn::Error::new_spanned(
            variadic,
            format!("{attr} handler must not be variadic"),
        ));
    }

    let output = match &sig.output {
        ReturnType::Default => None,
        ReturnType::Type(_, ty) => Some((**ty).clone()),
    };
    match kind {
        HandlerKind::Invoke => {
            const EXPECTED: &str = "must return `Result<T, E>` where `T: Serialize + JsonSchema` \
                 and `E: Into<Box<dyn Error + Send + Sync>>`";
            match &output {
                None => error(syn::Error::new(
                    sig.ident.span(),
                    format!("{attr} handler {EXPECTED}; found no return type"),
                )),
                Some(ty) if last_segment(ty).as_deref() != Some("Result") => {
                    error(syn::Error::new_spanned(
                        ty,
                        format!("{attr} handler {EXPECTED}; found `{}`", type_to_string(ty)),
                    ));
                }
                Some(_) => {}
            }
        }
        HandlerKind::FanIn if output.is_none() => error(syn::Error::new(
            sig.ident.span(),
            "`#[on_fan_in]` handler must return `Result<R, E>` where `R` is the task's reply \
             (it completes the task), or `Result<Delegated, E>` after delegating more; found \
             no return type",
        )),
        _ => {}
    }

    ok.then(|| SignatureModel {
        payload,
        state,
        value,
        extractors,
        output,
        params_close: sig.paren_token.span.close(),
    })
}

/// An `#[on_fan_in(..)]`'s replies argument must have one element per request type (a tuple
/// when there are several); the reply types themselves are checked by the compiler.
fn replies_arity_error(requests: &[Type], value: &Type) -> Option<syn::Error> {
    if requests.len() < 2 {
        return None;
    }
    let names: Vec<String> = requests.iter().map(type_to_string).collect();
    let of = format!("`({})`", names.join(", "));
    let n = requests.len();
    match strip_groups(value) {
        Type::Tuple(tuple) if tuple.elems.len() == n => None,
        Type::Tuple(tuple) => Some(syn::Error::new_spanned(
            value,
            format!(
                "`#[on_fan_in]` collects {n} replies, one per request type of {of}; this \
                 argument takes {}: write a tuple of the {n} reply types, in that order",
                tuple.elems.len(),
            ),
        )),
        _ => Some(syn::Error::new_spanned(
            value,
            format!(
                "`#[on_fan_in]` collects {n} replies, one per request type of {of}; take them \
                 as a tuple of the {n} reply types, in that order, e.g. `(a, b): (ReplyA, ReplyB)`"
            ),
        )),
    }
}

/// The message for a typed handler whose context has no payload type.
fn untyped_context_message(kind: HandlerKind) -> String {
    let context = kind.context_type();
    match kind {
        HandlerKind::FanIn => "`#[on_fan_in]` handler's task must name its request type, e.g. \
                               `task: TaskContext<Research>` (the task's reply is what the \
                               handler returns)"
            .to_owned(),
        _ => format!(
            "{attr} without an event name takes it from the payload type: write \
             `{context}<MyRequest>` with a request type (`#[derive(Request)]`), or name the \
             event, e.g. {example}",
            attr = kind.attr(),
            example = kind.example_attr()
        ),
    }
}

/// The type arguments of a path type's last segment (`T`, `S` in `TaskContext<T, S>`).
fn type_args(ty: &Type) -> Vec<&Type> {
    let Type::Path(path) = strip_groups(ty) else {
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

/// Checks that the first argument's type is the kind's context type.
fn check_context_type(kind: HandlerKind, ty: &Type) -> syn::Result<()> {
    let expected = kind.context_type();
    let (is_ref, inner) = match strip_groups(ty) {
        Type::Reference(reference) => (true, &*reference.elem),
        other => (false, other),
    };
    let found = last_segment(inner);
    if !is_ref && found.as_deref() == Some(expected) {
        return Ok(());
    }
    let other_kind = HandlerKind::ALL
        .into_iter()
        .find(|k| k.context_type() != expected && found.as_deref() == Some(k.context_type()));
    let hint = if let Some(other_kind) = other_kind {
        other_kind.use_hint().to_owned()
    } else if is_ref && found.as_deref() == Some(expected) {
        format!(
            "take it by value, not by reference: `{}`",
            kind.context_example()
        )
    } else {
        format!(
            "e.g. `{}` (extractors such as `State<S>` go after it)",
            kind.context_example()
        )
    };
    Err(syn::Error::new_spanned(
        ty,
        format!(
            "{} handler's first argument must be `{}`; found `{}`; {hint}",
            kind.attr(),
            kind.context_display(),
            type_to_string(ty)
        ),
    ))
}

fn article(word: &str) -> &'static str {
    match word.chars().next() {
        Some('A' | 'E' | 'I' | 'O' | 'U') => "an",
        _ => "a",
    }
}

/// Looks through `( )` and invisible groups around a type.
fn strip_groups(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => strip_groups(&group.elem),
        Type::Paren(paren) => strip_groups(&paren.elem),
        other => other,
    }
}

/// The last path segment of a path type, e.g. `Result` for `std::result::Result<A, B>`.
fn last_segment(ty: &Type) -> Option<String> {
    match strip_groups(ty) {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .map(|s| s.ident.unraw().to_string()),
        _ => None,
    }
}

/// Renders a type compactly for diagnostics, e.g. `TaskContext<Text>`
/// rather than `TaskContext < Text >`.
fn type_to_string(ty: &Type) -> String {
    render_tokens(ty.to_token_stream())
}

fn render_tokens(tokens: TokenStream) -> String {
    // Build pieces, merging joint punctuation (`::`, `->`, `'a`).
    let mut pieces: Vec<String> = Vec::new();
    let mut glue_next = false;
    for tree in tokens {
        let piece = match &tree {
            TokenTree::Group(group) => {
                let inner = render_tokens(group.stream());
                match group.delimiter() {
                    Delimiter::Parenthesis => format!("({inner})"),
                    Delimiter::Bracket => format!("[{inner}]"),
                    Delimiter::Brace => format!("{{ {inner} }}"),
                    Delimiter::None => inner,
                }
            }
            other => other.to_string(),
        };
        let joint =
            matches!(&tree, TokenTree::Punct(p) if p.spacing() == proc_macro2::Spacing::Joint);
        match pieces.last_mut() {
            Some(last) if glue_next => last.push_str(&piece),
            _ => pieces.push(piece),
        }
        glue_next = joint;
    }

    let mut out = String::new();
    let mut prev: Option<&str> = None;
    for piece in &pieces {
        // `fn(u8)`, `Fn(&str)`: a parenthesized group directly after a name.
        let call_parens = piece.starts_with('(')
            && prev.is_some_and(|p| {
                p.ends_with(|c: char| c.is_alphanumeric() || c == '_')
                    && !matches!(p, "mut" | "dyn" | "impl" | "const" | "as")
            });
        let no_space_before =
            call_parens || matches!(piece.as_str(), ">" | "," | ";" | "<" | "::" | "?");
        let no_space_after_prev = matches!(prev, Some("<" | "&" | "::" | "*" | "!" | "#") | None);
        if !(no_space_before || no_space_after_prev) {
            out.push(' ');
        }
        out.push_str(piece);
        prev = Some(piece);
    }
    out
}

// ---------------------------------------------------------------------------
// Description
// ---------------------------------------------------------------------------

/// The description from `///` doc comments: each line with one leading space
/// stripped, joined with `\n`, trimmed.
fn doc_description(attrs: &[Attribute]) -> String {
    let mut lines: Vec<String> = Vec::new();
    for attr in attrs {
        if !attr.path().is_ident("doc") {
            continue;
        }
        let Meta::NameValue(name_value) = &attr.meta else {
            continue;
        };
        let Some(lit) = lit_str(&name_value.value) else {
            continue;
        };
        for line in lit.value().split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            lines.push(line.strip_prefix(' ').unwrap_or(line).to_owned());
        }
    }
    lines.join("\n").trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    const ALL: [HandlerKind; 7] = HandlerKind::ALL;

    fn parse_all(kind: HandlerKind, args: TokenStream, item: TokenStream) -> syn::Result<FnModel> {
        parse_fn(kind, args, item).map_err(|failure| failure.error)
    }

    /// The model of the (first) handler.
    fn parse(kind: HandlerKind, args: TokenStream, item: TokenStream) -> syn::Result<HandlerModel> {
        parse_all(kind, args, item).map(|mut model| model.handlers.remove(0))
    }

    /// The event name of a handler model.
    fn event_of(model: &HandlerModel) -> String {
        model.event.as_ref().map(LitStr::value).unwrap_or_default()
    }

    /// All error messages, in order.
    fn errors(kind: HandlerKind, args: TokenStream, item: TokenStream) -> Vec<String> {
        match parse(kind, args, item) {
            Ok(_) => Vec::new(),
            Err(error) => error.into_iter().map(|e| e.to_string()).collect(),
        }
    }

    /// The single error message; panics if there is not exactly one.
    fn error(kind: HandlerKind, args: TokenStream, item: TokenStream) -> String {
        let errors = errors(kind, args, item);
        assert_eq!(
            errors.len(),
            1,
            "expected exactly one error, got {errors:#?}"
        );
        errors.into_iter().next().unwrap()
    }

    fn ok(kind: HandlerKind, args: TokenStream, item: TokenStream) -> HandlerModel {
        match parse(kind, args, item) {
            Ok(model) => model,
            Err(error) => panic!(
                "expected success, got {:#?}",
                error.into_iter().map(|e| e.to_string()).collect::<Vec<_>>()
            ),
        }
    }

    /// Valid args for `kind`.
    fn args(kind: HandlerKind) -> TokenStream {
        match kind {
            HandlerKind::Event => quote!(topic = "business-facts", event = "order.placed"),
            HandlerKind::Transition => quote!(),
            HandlerKind::FanIn => quote!(Search),
            _ => quote!("some.event"),
        }
    }

    /// A valid handler for `kind`.
    fn item(kind: HandlerKind) -> TokenStream {
        match kind {
            HandlerKind::Event => quote!(
                async fn handle(e: Event<OrderPlaced>) {}
            ),
            HandlerKind::Invoke => {
                quote!(
                    async fn handle(req: Invocation<Calculate>) -> Result<Calculated, ToolError> {
                        todo!()
                    }
                )
            }
            HandlerKind::Task => quote!(
                async fn handle(t: TaskContext<Research>) -> Result<(), Error> {
                    todo!()
                }
            ),
            HandlerKind::Result => quote!(
                async fn handle(r: ResultContext<Findings>) {}
            ),
            HandlerKind::Goal => quote!(
                async fn handle(g: GoalContext<Research>) -> soorma::Result<()> {
                    todo!()
                }
            ),
            HandlerKind::Transition => quote!(
                async fn handle(mut plan: PlanContext) -> soorma::Result<()> {
                    todo!()
                }
            ),
            HandlerKind::FanIn => quote!(
                async fn handle(t: TaskContext<Research>, hits: Hits) -> soorma::Result<Report> {
                    todo!()
                }
            ),
        }
    }

    // --- happy paths -------------------------------------------------------

    #[test]
    fn happy_invoke() {
        let model = ok(
            HandlerKind::Invoke,
            quote!(
                "calculate.requested",
                agent = "calculator",
                name = "calculate"
            ),
            quote! {
                /// Evaluates an arithmetic expression.
                #[allow(dead_code)]
                pub async fn calculate(req: Invocation<Calculate>, state: State<Db>) -> Result<Calculated, ToolError> {
                    todo!()
                }
            },
        );
        assert_eq!(model.kind, HandlerKind::Invoke);
        assert_eq!(event_of(&model), "calculate.requested");
        assert_eq!(model.agent.unwrap().value(), "calculator");
        assert_eq!(model.name.unwrap().value(), "calculate");
        assert_eq!(model.description, "Evaluates an arithmetic expression.");
        assert!(model.topic.is_none());
        assert!(model.krate.is_none());
        assert_eq!(
            model.sig.payload.map(|t| type_to_string(&t)).as_deref(),
            Some("Calculate")
        );
        assert_eq!(
            model
                .sig
                .extractors
                .iter()
                .map(type_to_string)
                .collect::<Vec<_>>(),
            ["State<Db>"]
        );
    }

    #[test]
    fn happy_all_kinds() {
        for kind in ALL {
            let model = ok(kind, args(kind), item(kind));
            assert_eq!(model.kind, kind);
            assert!(model.agent.is_none());
            assert!(model.name.is_none());
            assert_eq!(model.description, "");
        }
    }

    #[test]
    fn happy_event_forms() {
        let positional = ok(
            HandlerKind::Event,
            quote!("business-facts", "order.placed"),
            item(HandlerKind::Event),
        );
        assert_eq!(positional.topic.as_ref().unwrap().variant, "BusinessFacts");
        assert_eq!(event_of(&positional), "order.placed");

        let mixed = ok(
            HandlerKind::Event,
            quote!("order.placed", topic = "task-events"),
            item(HandlerKind::Event),
        );
        assert_eq!(mixed.topic.as_ref().unwrap().variant, "TaskEvents");
        assert_eq!(mixed.topic.as_ref().unwrap().lit.value(), "task-events");
        assert_eq!(event_of(&mixed), "order.placed");

        let mixed2 = ok(
            HandlerKind::Event,
            quote!("plan-events", event = "*"),
            item(HandlerKind::Event),
        );
        assert_eq!(mixed2.topic.as_ref().unwrap().variant, "PlanEvents");
        assert_eq!(event_of(&mixed2), "*");

        let named = ok(
            HandlerKind::Event,
            quote!(
                event = "a-b_c.D9",
                topic = "system-events",
                agent = "x",
                description = "d"
            ),
            item(HandlerKind::Event),
        );
        assert_eq!(event_of(&named), "a-b_c.D9");
        assert_eq!(named.description, "d");
    }

    #[test]
    fn all_topics_map_to_variants() {
        for (topic, variant) in TOPICS {
            let model = ok(
                HandlerKind::Event,
                quote!(#topic, "x"),
                item(HandlerKind::Event),
            );
            assert_eq!(model.topic.unwrap().variant, variant);
        }
    }

    #[test]
    fn happy_named_event_and_trailing_comma() {
        let model = ok(
            HandlerKind::Task,
            quote!(event = "research.requested", name = "research",),
            item(HandlerKind::Task),
        );
        assert_eq!(event_of(&model), "research.requested");
        assert_eq!(model.name.unwrap().value(), "research");
    }

    #[test]
    fn invoke_result_paths_accepted() {
        for ret in [
            quote!(Result<Calculated, ToolError>),
            quote!(soorma::Result<X>),
            quote!(std::result::Result<A, B>),
            quote!(::core::result::Result<A, B>),
        ] {
            ok(
                HandlerKind::Invoke,
                args(HandlerKind::Invoke),
                quote!(async fn f(r: Invocation<A>) -> #ret { todo!() }),
            );
        }
    }

    #[test]
    fn qualified_and_pattern_context_accepted() {
        ok(
            HandlerKind::Invoke,
            args(HandlerKind::Invoke),
            quote!(
                async fn f(soorma::Invocation(x): ::soorma::Invocation<A>) -> Result<(), E> {
                    todo!()
                }
            ),
        );
        ok(
            HandlerKind::Result,
            args(HandlerKind::Result),
            quote!(
                async fn f(mut r: ResultContext<A>, s: State<S>) -> u32 {
                    1
                }
            ),
        );
    }

    #[test]
    fn stacked_attributes_are_expanded_together() {
        let model = parse_all(
            HandlerKind::Result,
            quote!("a"),
            quote! {
                /// Doc.
                #[on_result("b")]
                #[allow(dead_code)]
                #[soorma::on_result(event = "c", agent = "x")]
                #[sdk::on_invoke]
                async fn collect(r: ResultContext<Findings>) {}
            },
        );
        let Err(error) = model else {
            panic!("an `#[on_invoke]` on a result handler is an error");
        };
        assert_eq!(
            error.to_string(),
            "`#[on_invoke]` handler's first argument must be `Invocation<T>`; found `ResultContext<Findings>`; use `#[on_result]` to handle results"
        );

        let model = parse_all(
            HandlerKind::Result,
            quote!("a"),
            quote! {
                /// Doc.
                #[on_result("b")]
                #[allow(dead_code)]
                #[soorma::on_result(event = "c", agent = "x")]
                async fn collect(r: ResultContext<Findings>) {}
            },
        )
        .unwrap();
        let events: Vec<String> = model.handlers.iter().map(event_of).collect();
        assert_eq!(events, ["a", "b", "c"]);
        assert_eq!(model.handlers[2].agent.as_ref().unwrap().value(), "x");
        assert!(model.handlers.iter().all(|h| h.description == "Doc."));
        // The soorma attributes are stripped; the others are kept.
        let kept: Vec<String> = model
            .item_fn
            .attrs
            .iter()
            .map(|a| a.path().to_token_stream().to_string())
            .collect();
        assert_eq!(kept, ["doc", "allow"]);
    }

    #[test]
    fn stacked_errors_are_reported_once() {
        assert_eq!(
            errors(
                HandlerKind::Result,
                quote!("a"),
                quote! {
                    #[on_result("b")]
                    #[on_result("c d")]
                    fn collect(r: ResultContext<Findings>) {}
                }
            ),
            [
                "`#[on_result]` handler must be `async fn`; found `fn`",
                "invalid character ' ' in event name `c d`; use only ASCII letters, digits, `.`, `-` and `_`",
            ]
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                quote!("a"),
                quote! {
                    #[on_result = "b"]
                    async fn collect(r: ResultContext<Findings>) {}
                }
            ),
            "`#[on_result]` takes its arguments in parentheses, e.g. `#[on_result(\"research.completed\")]`"
        );
    }

    // --- typed forms, fan-in, crate ------------------------------------------

    #[test]
    fn typed_forms() {
        for kind in [HandlerKind::Invoke, HandlerKind::Task, HandlerKind::Goal] {
            let model = ok(kind, quote!(agent = "a", name = "n"), item(kind));
            assert!(model.event.is_none(), "{kind:?}");
            assert!(model.sig.payload.is_some(), "{kind:?}");
        }
        let model = ok(
            HandlerKind::Task,
            quote!(),
            quote!(
                async fn t(task: TaskContext<Research, Notes>, s: State<Db>) {}
            ),
        );
        assert_eq!(type_to_string(model.sig.state.as_ref().unwrap()), "Notes");
    }

    #[test]
    fn typed_forms_need_a_payload_type() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!(),
                quote!(
                    async fn f(r: Invocation) -> Result<A, B> {
                        todo!()
                    }
                )
            ),
            "`#[on_invoke]` without an event name takes it from the payload type: write `Invocation<MyRequest>` with a request type (`#[derive(Request)]`), or name the event, e.g. `#[on_invoke(\"calculate.requested\")]`"
        );
        assert_eq!(
            error(
                HandlerKind::Goal,
                quote!(agent = "p"),
                quote!(
                    async fn f(g: soorma::planner::GoalContext) {}
                )
            ),
            "`#[on_goal]` without an event name takes it from the payload type: write `GoalContext<MyRequest>` with a request type (`#[derive(Request)]`), or name the event, e.g. `#[on_goal(\"research.goal\")]`"
        );
        // The string-named forms default to `serde_json::Value`.
        ok(
            HandlerKind::Task,
            quote!("t"),
            quote!(
                async fn f(t: TaskContext) {}
            ),
        );
    }

    #[test]
    fn fan_in_arguments() {
        let model = ok(
            HandlerKind::FanIn,
            quote!(Search, my::Summarize, agent = "researcher", crate = "sdk"),
            quote!(
                async fn collect(
                    t: TaskContext<Research>,
                    (a, b): (Hits, Summary),
                    bus: BusClient,
                ) -> soorma::Result<Report> {
                    todo!()
                }
            ),
        );
        let requests: Vec<String> = model.requests.iter().map(type_to_string).collect();
        assert_eq!(requests, ["Search", "my::Summarize"]);
        assert_eq!(
            type_to_string(model.sig.value.as_ref().unwrap()),
            "(Hits, Summary)"
        );
        assert_eq!(model.sig.extractors.len(), 1);
        assert_eq!(model.krate.unwrap().to_token_stream().to_string(), "sdk");

        assert_eq!(
            error(HandlerKind::FanIn, quote!(), item(HandlerKind::FanIn)),
            "`#[on_fan_in]` needs the request types whose replies it collects, in the order of the fan-out, e.g. `#[on_fan_in(Search, Summarize)]`"
        );
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!("search.requested"),
                item(HandlerKind::FanIn)
            ),
            "`#[on_fan_in]` takes the request types whose replies it collects, not event names, e.g. `#[on_fan_in(Search, Summarize)]`"
        );
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!(Search, event = "x"),
                item(HandlerKind::FanIn)
            ),
            "`#[on_fan_in]` takes no event name: name the request types whose replies it collects, e.g. `#[on_fan_in(Search, Summarize)]`; it expects one of: `agent`, `description`, `crate`"
        );
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!(A, B, C, D, E, F, G, H, I),
                item(HandlerKind::FanIn)
            ),
            "`#[on_fan_in]` collects at most 8 request types; found 9"
        );
    }

    #[test]
    fn fan_in_signature() {
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!(Search),
                quote!(
                    async fn f(t: TaskContext<Research>) -> soorma::Result<u8> {
                        todo!()
                    }
                )
            ),
            "`#[on_fan_in]` handler takes the task, then the replies (in the order of the request types), e.g. `async fn collect(task: TaskContext<Research>, (sentiment, summary): (Sentiment, Summary))`"
        );
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!(Search),
                quote!(
                    async fn f(t: TaskContext<Research>, hits: Hits) {}
                )
            ),
            "`#[on_fan_in]` handler must return `Result<R, E>` where `R` is the task's reply (it completes the task), or `Result<Delegated, E>` after delegating more; found no return type"
        );
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!(Search),
                quote!(
                    async fn f(t: TaskContext, hits: Hits) -> soorma::Result<u8> {
                        todo!()
                    }
                )
            ),
            "`#[on_fan_in]` handler's task must name its request type, e.g. `task: TaskContext<Research>` (the task's reply is what the handler returns)"
        );
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!(Search, Summarize),
                quote!(
                    async fn f(t: TaskContext<R>, (a, b, c): (A, B, C)) -> soorma::Result<u8> {
                        todo!()
                    }
                )
            ),
            "`#[on_fan_in]` collects 2 replies, one per request type of `(Search, Summarize)`; this argument takes 3: write a tuple of the 2 reply types, in that order"
        );
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!(Search, Summarize),
                quote!(
                    async fn f(t: TaskContext<R>, all: Vec<A>) -> soorma::Result<u8> {
                        todo!()
                    }
                )
            ),
            "`#[on_fan_in]` collects 2 replies, one per request type of `(Search, Summarize)`; take them as a tuple of the 2 reply types, in that order, e.g. `(a, b): (ReplyA, ReplyB)`"
        );
        // One request: its reply may itself be a tuple.
        ok(
            HandlerKind::FanIn,
            quote!(Pair),
            quote!(
                async fn f(t: TaskContext<R>, (a, b): (A, B)) -> soorma::Result<u8> {
                    todo!()
                }
            ),
        );
    }

    #[test]
    fn too_many_extractors() {
        assert_eq!(
            error(
                HandlerKind::Event,
                args(HandlerKind::Event),
                quote!(
                    async fn f(e: Event, a: A, b: B, c: C, d: D, e2: E, f: F, g: G) {}
                )
            ),
            "`#[on_event]` handler takes at most 6 extractors after its context; found 7"
        );
        assert_eq!(
            error(
                HandlerKind::FanIn,
                quote!(S),
                quote!(
                    async fn f(
                        t: TaskContext<R>,
                        r: X,
                        a: A,
                        b: B,
                        c: C,
                        d: D,
                        e2: E,
                        f: F,
                    ) -> Result<u8, E> {
                        todo!()
                    }
                )
            ),
            "`#[on_fan_in]` handler takes at most 5 extractors after its task and replies; found 6"
        );
    }

    #[test]
    fn crate_argument() {
        let model = ok(
            HandlerKind::Invoke,
            quote!(crate = "::my::sdk"),
            item(HandlerKind::Invoke),
        );
        assert_eq!(
            model.krate.unwrap().to_token_stream().to_string(),
            ":: my :: sdk"
        );
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!(crate = "a b"),
                item(HandlerKind::Invoke)
            ),
            "`crate` must be the path of the soorma crate, e.g. `crate = \"sdk\"` for `sdk = { package = \"soorma\", .. }`; found `a b`"
        );
        assert_eq!(
            find_crate(&quote!("e", agent = 1, crate = "sdk"))
                .map(|p| p.to_token_stream().to_string())
                .as_deref(),
            Some("sdk")
        );
        assert!(find_crate(&quote!("e")).is_none());
    }

    // --- description -------------------------------------------------------

    #[test]
    fn description_from_docs() {
        let model = ok(
            HandlerKind::Invoke,
            args(HandlerKind::Invoke),
            quote! {
                /// First line.
                ///
                ///   Indented line.
                #[doc = "Last line.  "]
                #[doc(hidden)]
                async fn f(r: Invocation<A>) -> Result<B, C> { todo!() }
            },
        );
        assert_eq!(
            model.description,
            "First line.\n\n  Indented line.\nLast line."
        );
    }

    #[test]
    fn description_from_block_doc() {
        let item: ItemFn =
            syn::parse_str("/**\n Block doc.\n More.\n */ async fn f(r: ResultContext<A>) {}")
                .unwrap();
        assert_eq!(doc_description(&item.attrs), "Block doc.\nMore.");
    }

    #[test]
    fn description_override() {
        let model = ok(
            HandlerKind::Event,
            quote!(
                "business-facts",
                "order.placed",
                description = "  Overridden.  "
            ),
            quote! {
                /// From docs.
                async fn f(e: Event<A>) {}
            },
        );
        assert_eq!(model.description, "Overridden.");
    }

    #[test]
    fn description_override_empty() {
        let model = ok(
            HandlerKind::Task,
            quote!("x", description = ""),
            quote! {
                /// From docs.
                async fn f(t: TaskContext<A>) {}
            },
        );
        assert_eq!(model.description, "");
    }

    // --- function diagnostics ---------------------------------------------

    #[test]
    fn not_async() {
        assert_eq!(
            error(
                HandlerKind::Task,
                args(HandlerKind::Task),
                quote!(
                    fn f(t: TaskContext<A>) {}
                )
            ),
            "`#[on_task]` handler must be `async fn`; found `fn`"
        );
    }

    #[test]
    fn self_receiver() {
        assert_eq!(
            error(
                HandlerKind::Task,
                args(HandlerKind::Task),
                quote!(
                    async fn f(&self, t: TaskContext<A>) {}
                )
            ),
            "`#[on_task]` handler must be a free function, not a method; remove the `self` receiver"
        );
    }

    #[test]
    fn only_self_receiver_also_reports_missing_context() {
        assert_eq!(
            errors(
                HandlerKind::Event,
                args(HandlerKind::Event),
                quote!(
                    async fn f(self) {}
                )
            ),
            [
                "`#[on_event]` handler must be a free function, not a method; remove the `self` receiver",
                "`#[on_event]` handler must take an `Event<T>` as its first argument",
            ]
        );
    }

    #[test]
    fn generics() {
        assert_eq!(
            error(
                HandlerKind::Result,
                args(HandlerKind::Result),
                quote!(
                    async fn f<T: Send>(r: ResultContext<T>) {}
                )
            ),
            "`#[on_result]` handler must not have generic parameters; use concrete types"
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                args(HandlerKind::Result),
                quote!(
                    async fn f<'a>(r: ResultContext<A>) {}
                )
            ),
            "`#[on_result]` handler must not have generic parameters; use concrete types"
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                args(HandlerKind::Result),
                quote!(
                    async fn f(r: ResultContext<A>)
                    where
                        A: Send,
                    {
                    }
                )
            ),
            "`#[on_result]` handler must not have a `where` clause; use concrete types"
        );
    }

    #[test]
    fn impl_trait_argument() {
        assert_eq!(
            error(
                HandlerKind::Result,
                args(HandlerKind::Result),
                quote!(
                    async fn f(r: ResultContext<A>, s: impl Send) {}
                )
            ),
            "`#[on_result]` handler must not take `impl Trait` arguments; use a concrete type"
        );
    }

    #[test]
    fn const_unsafe_extern_variadic() {
        assert_eq!(
            errors(
                HandlerKind::Event,
                args(HandlerKind::Event),
                quote!(
                    const async unsafe extern "C" fn f(e: Event<A>, ...) {}
                )
            ),
            [
                "`#[on_event]` handler must not be `const`; write `async fn`",
                "`#[on_event]` handler must not be `unsafe`; write a safe `async fn`",
                "`#[on_event]` handler must not be `extern`; write a plain `async fn`",
                "`#[on_event]` handler must not be variadic",
            ]
        );
    }

    #[test]
    fn no_arguments() {
        let expected = [
            "`#[on_event]` handler must take an `Event<T>` as its first argument",
            "`#[on_invoke]` handler must take an `Invocation<T>` as its first argument",
            "`#[on_task]` handler must take a `TaskContext<T>` as its first argument",
            "`#[on_result]` handler must take a `ResultContext<T>` as its first argument",
        ];
        for (kind, expected) in ALL.into_iter().zip(expected) {
            let item = match kind {
                HandlerKind::Invoke => quote!(
                    async fn f() -> Result<A, B> {
                        todo!()
                    }
                ),
                _ => quote!(
                    async fn f() {}
                ),
            };
            assert_eq!(error(kind, args(kind), item), expected);
        }
    }

    #[test]
    fn wrong_first_argument_other_kinds_context() {
        let cases = [
            (
                HandlerKind::Event,
                quote!(Invocation<Text>),
                "`#[on_event]` handler's first argument must be `Event<T>`; found `Invocation<Text>`; use `#[on_invoke]` to handle invocations",
            ),
            (
                HandlerKind::Invoke,
                quote!(Event<Text>),
                "`#[on_invoke]` handler's first argument must be `Invocation<T>`; found `Event<Text>`; use `#[on_event]` to handle events",
            ),
            (
                HandlerKind::Task,
                quote!(ResultContext<Text>),
                "`#[on_task]` handler's first argument must be `TaskContext<T>`; found `ResultContext<Text>`; use `#[on_result]` to handle results",
            ),
            (
                HandlerKind::Result,
                quote!(TaskContext<Text>),
                "`#[on_result]` handler's first argument must be `ResultContext<T>`; found `TaskContext<Text>`; use `#[on_task]` to handle tasks",
            ),
        ];
        for (kind, ty, expected) in cases {
            let item = quote!(async fn f(x: #ty) -> Result<A, B> { todo!() });
            assert_eq!(error(kind, args(kind), item), expected);
        }
    }

    #[test]
    fn wrong_first_argument_generic_hint() {
        let cases = [
            (
                HandlerKind::Event,
                quote!(State<Db>),
                "`#[on_event]` handler's first argument must be `Event<T>`; found `State<Db>`; e.g. `event: Event<OrderPlaced>` (extractors such as `State<S>` go after it)",
            ),
            (
                HandlerKind::Invoke,
                quote!(String),
                "`#[on_invoke]` handler's first argument must be `Invocation<T>`; found `String`; e.g. `req: Invocation<Calculate>` (extractors such as `State<S>` go after it)",
            ),
            (
                HandlerKind::Task,
                quote!((u8, Vec<Vec<u8>>)),
                "`#[on_task]` handler's first argument must be `TaskContext<T>`; found `(u8, Vec<Vec<u8>>)`; e.g. `task: TaskContext<Research>` (extractors such as `State<S>` go after it)",
            ),
            (
                HandlerKind::Result,
                quote!(&'a mut [u8; 4]),
                "`#[on_result]` handler's first argument must be `ResultContext<T>`; found `&'a mut [u8; 4]`; e.g. `result: ResultContext<Findings>` (extractors such as `State<S>` go after it)",
            ),
        ];
        for (kind, ty, expected) in cases {
            let item = quote!(async fn f(x: #ty) -> Result<A, B> { todo!() });
            assert_eq!(error(kind, args(kind), item), expected);
        }
    }

    #[test]
    fn reference_to_context() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                args(HandlerKind::Invoke),
                quote!(
                    async fn f(r: &Invocation<A>) -> Result<A, B> {
                        todo!()
                    }
                )
            ),
            "`#[on_invoke]` handler's first argument must be `Invocation<T>`; found `&Invocation<A>`; take it by value, not by reference: `req: Invocation<Calculate>`"
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                args(HandlerKind::Result),
                quote!(
                    async fn f(r: &soorma::TaskContext<A>) {}
                )
            ),
            "`#[on_result]` handler's first argument must be `ResultContext<T>`; found `&soorma::TaskContext<A>`; use `#[on_task]` to handle tasks"
        );
    }

    #[test]
    fn invoke_return_type() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                args(HandlerKind::Invoke),
                quote!(
                    async fn f(r: Invocation<A>) -> Calculated {
                        todo!()
                    }
                )
            ),
            "`#[on_invoke]` handler must return `Result<T, E>` where `T: Serialize + JsonSchema` and `E: Into<Box<dyn Error + Send + Sync>>`; found `Calculated`"
        );
        assert_eq!(
            error(
                HandlerKind::Invoke,
                args(HandlerKind::Invoke),
                quote!(
                    async fn f(r: Invocation<A>) -> Option<Result<A, B>> {
                        todo!()
                    }
                )
            ),
            "`#[on_invoke]` handler must return `Result<T, E>` where `T: Serialize + JsonSchema` and `E: Into<Box<dyn Error + Send + Sync>>`; found `Option<Result<A, B>>`"
        );
        assert_eq!(
            error(
                HandlerKind::Invoke,
                args(HandlerKind::Invoke),
                quote!(
                    async fn f(r: Invocation<A>) {}
                )
            ),
            "`#[on_invoke]` handler must return `Result<T, E>` where `T: Serialize + JsonSchema` and `E: Into<Box<dyn Error + Send + Sync>>`; found no return type"
        );
    }

    #[test]
    fn other_kinds_accept_any_return_type() {
        for kind in [HandlerKind::Event, HandlerKind::Task, HandlerKind::Result] {
            let ctx = syn::Ident::new(kind.context_type(), Span::call_site());
            ok(
                kind,
                args(kind),
                quote!(async fn f(x: #ctx<A>) -> u32 { 1 }),
            );
            ok(kind, args(kind), quote!(async fn f(x: #ctx<A>) {}));
        }
    }

    #[test]
    fn not_a_function() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                args(HandlerKind::Invoke),
                quote!(
                    struct S;
                )
            ),
            "`#[on_invoke]` can only be applied to an `async fn`, e.g. `async fn handler(req: Invocation<Calculate>) { ... }`"
        );
    }

    // --- argument diagnostics ---------------------------------------------

    #[test]
    fn missing_event() {
        let expected =
            "`#[on_result]` needs an event name, e.g. `#[on_result(\"research.completed\")]`";
        assert_eq!(
            error(HandlerKind::Result, quote!(), item(HandlerKind::Result)),
            expected
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                quote!(agent = "researcher"),
                item(HandlerKind::Result)
            ),
            expected
        );
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!(topic = "business-facts"),
                item(HandlerKind::Event)
            ),
            "`#[on_event]` needs an event name, e.g. `#[on_event(topic = \"business-facts\", event = \"order.placed\")]`"
        );
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!("business-facts"),
                item(HandlerKind::Event)
            ),
            "`#[on_event]` needs an event name, e.g. `#[on_event(topic = \"business-facts\", event = \"order.placed\")]`"
        );
    }

    #[test]
    fn empty_event() {
        assert_eq!(
            error(HandlerKind::Invoke, quote!(""), item(HandlerKind::Invoke)),
            "event name must not be empty; use ASCII letters, digits, `.`, `-` and `_`, e.g. `\"calculate.requested\"`"
        );
    }

    #[test]
    fn bad_event_chars() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!("calculate requested"),
                item(HandlerKind::Invoke)
            ),
            "invalid character ' ' in event name `calculate requested`; use only ASCII letters, digits, `.`, `-` and `_`"
        );
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!("business-facts", "order/placed"),
                item(HandlerKind::Event)
            ),
            "invalid character '/' in event name `order/placed`; use only ASCII letters, digits, `.`, `-` and `_` (or exactly `\"*\"` for all events)"
        );
        assert_eq!(
            error(
                HandlerKind::Task,
                quote!("order.*"),
                item(HandlerKind::Task)
            ),
            "invalid character '*' in event name `order.*`; use only ASCII letters, digits, `.`, `-` and `_`"
        );
        assert_eq!(
            error(HandlerKind::Task, quote!("café"), item(HandlerKind::Task)),
            "invalid character 'é' in event name `café`; use only ASCII letters, digits, `.`, `-` and `_`"
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                quote!(".done"),
                item(HandlerKind::Result)
            ),
            "event name `.done` must not start or end with `.`; use dot-separated segments, e.g. `\"research.completed\"`"
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                quote!("done."),
                item(HandlerKind::Result)
            ),
            "event name `done.` must not start or end with `.`; use dot-separated segments, e.g. `\"research.completed\"`"
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                quote!("a..b"),
                item(HandlerKind::Result)
            ),
            "event name `a..b` must not contain `..`; use dot-separated non-empty segments, e.g. `\"research.completed\"`"
        );
    }

    #[test]
    fn wildcard_only_for_on_event() {
        ok(
            HandlerKind::Event,
            quote!(topic = "business-facts", event = "*"),
            item(HandlerKind::Event),
        );
        assert_eq!(
            error(HandlerKind::Invoke, quote!("*"), item(HandlerKind::Invoke)),
            "`\"*\"` (all events) is only allowed in `#[on_event]`; `#[on_invoke]` needs a concrete event name, e.g. `\"calculate.requested\"`"
        );
        assert_eq!(
            error(
                HandlerKind::Result,
                quote!(event = "*"),
                item(HandlerKind::Result)
            ),
            "`\"*\"` (all events) is only allowed in `#[on_event]`; `#[on_result]` needs a concrete event name, e.g. `\"research.completed\"`"
        );
    }

    #[test]
    fn unknown_argument() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!("e", foo = "x"),
                item(HandlerKind::Invoke)
            ),
            "unknown argument `foo` for `#[on_invoke]`; expected one of: `event`, `agent`, `description`, `name`, `crate`"
        );
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!("business-facts", "e", type = "x"),
                item(HandlerKind::Event)
            ),
            "unknown argument `type` for `#[on_event]`; expected one of: `topic`, `event`, `agent`, `description`, `crate`"
        );
        assert_eq!(
            error(
                HandlerKind::Task,
                quote!("e", topic = "business-facts"),
                item(HandlerKind::Task)
            ),
            "argument `topic` is only allowed on `#[on_event]`; `#[on_task]` expects one of: `event`, `agent`, `description`, `name`, `crate`"
        );
    }

    #[test]
    fn name_only_on_invoke_and_task() {
        assert_eq!(
            error(
                HandlerKind::Result,
                quote!("e", name = "x"),
                item(HandlerKind::Result)
            ),
            "argument `name` is only allowed on `#[on_invoke]`, `#[on_task]` and `#[on_goal]`; `#[on_result]` expects one of: `event`, `agent`, `description`, `crate`"
        );
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!("business-facts", "e", name = "x"),
                item(HandlerKind::Event)
            ),
            "argument `name` is only allowed on `#[on_invoke]`, `#[on_task]` and `#[on_goal]`; `#[on_event]` expects one of: `topic`, `event`, `agent`, `description`, `crate`"
        );
    }

    #[test]
    fn duplicate_argument() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!("e", agent = "a", agent = "b"),
                item(HandlerKind::Invoke)
            ),
            "duplicate argument `agent` for `#[on_invoke]`"
        );
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!("e", event = "f"),
                item(HandlerKind::Invoke)
            ),
            "duplicate argument `event` for `#[on_invoke]`: the event name is already given positionally"
        );
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!("business-facts", "e", topic = "task-events"),
                item(HandlerKind::Event)
            ),
            "duplicate argument `topic` for `#[on_event]`: the topic is already given positionally"
        );
    }

    #[test]
    fn non_string_values() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!("e", agent = 5),
                item(HandlerKind::Invoke)
            ),
            "`agent` must be a string literal, e.g. `agent = \"calculator\"`"
        );
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!(event = calculate),
                item(HandlerKind::Invoke)
            ),
            "`event` must be a string literal, e.g. `event = \"calculate.requested\"`"
        );
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!(calculate.requested),
                item(HandlerKind::Invoke)
            ),
            "expected a string literal; the positional argument of `#[on_invoke]` is the event name, e.g. `#[on_invoke(\"calculate.requested\")]`"
        );
    }

    #[test]
    fn invalid_arguments_do_not_cascade() {
        // An invalid event/topic is not additionally reported as missing.
        assert_eq!(
            errors(
                HandlerKind::Event,
                quote!(topic = 1, event = 2),
                item(HandlerKind::Event)
            ),
            [
                "`topic` must be a string literal, e.g. `topic = \"business-facts\"`",
                "`event` must be a string literal, e.g. `event = \"order.placed\"`",
            ]
        );
        // A duplicate is detected even if the first occurrence was invalid.
        assert_eq!(
            errors(
                HandlerKind::Invoke,
                quote!("e", agent = 1, agent = "b"),
                item(HandlerKind::Invoke)
            ),
            [
                "`agent` must be a string literal, e.g. `agent = \"calculator\"`",
                "duplicate argument `agent` for `#[on_invoke]`",
            ]
        );
    }

    #[test]
    fn single_positional_with_named_event_is_the_topic() {
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!("orders", event = "order.placed"),
                item(HandlerKind::Event)
            ),
            "unknown topic `orders`; expected one of: `business-facts`, `action-requests`, `action-results`, `billing-events`, `notification-events`, `system-events`, `plan-events`, `task-events`"
        );
    }

    #[test]
    fn empty_agent_and_name() {
        assert_eq!(
            errors(
                HandlerKind::Task,
                quote!("e", agent = "", name = " "),
                item(HandlerKind::Task)
            ),
            [
                "`agent` must not be empty, e.g. `agent = \"calculator\"`",
                "`name` must not be empty, e.g. `name = \"calculate\"`",
            ]
        );
    }

    #[test]
    fn extra_positional() {
        assert_eq!(
            error(
                HandlerKind::Invoke,
                quote!("e", "calculator"),
                item(HandlerKind::Invoke)
            ),
            "unexpected extra positional argument; `#[on_invoke]` takes one positional argument (the event name); pass the others by name: `event`, `agent`, `description`, `name`, `crate`"
        );
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!("business-facts", "e", "x"),
                item(HandlerKind::Event)
            ),
            "unexpected extra positional argument; `#[on_event]` takes at most two positional arguments (the topic and the event name), e.g. `#[on_event(\"business-facts\", \"order.placed\")]`"
        );
    }

    #[test]
    fn malformed_arguments() {
        let errors = errors(
            HandlerKind::Invoke,
            quote!("e" agent),
            item(HandlerKind::Invoke),
        );
        assert_eq!(errors.len(), 1, "{errors:?}");
    }

    #[test]
    fn missing_topic() {
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!(event = "order.placed"),
                item(HandlerKind::Event)
            ),
            "`#[on_event]` needs a topic, e.g. `#[on_event(topic = \"business-facts\", event = \"order.placed\")]`; allowed topics: `business-facts`, `action-requests`, `action-results`, `billing-events`, `notification-events`, `system-events`, `plan-events`, `task-events`"
        );
        // A single positional that is not a topic is the event name.
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!("order.placed"),
                item(HandlerKind::Event)
            ),
            "`#[on_event]` needs a topic, e.g. `#[on_event(topic = \"business-facts\", event = \"order.placed\")]`; allowed topics: `business-facts`, `action-requests`, `action-results`, `billing-events`, `notification-events`, `system-events`, `plan-events`, `task-events`"
        );
        assert_eq!(
            errors(HandlerKind::Event, quote!(), item(HandlerKind::Event)).len(),
            2
        );
    }

    #[test]
    fn unknown_topic() {
        assert_eq!(
            error(
                HandlerKind::Event,
                quote!(topic = "business_facts", event = "order.placed"),
                item(HandlerKind::Event)
            ),
            "unknown topic `business_facts`; expected one of: `business-facts`, `action-requests`, `action-results`, `billing-events`, `notification-events`, `system-events`, `plan-events`, `task-events`"
        );
    }

    #[test]
    fn collects_all_errors() {
        let errors = errors(
            HandlerKind::Invoke,
            quote!("bad event", foo = "x", agent = "a", agent = "b"),
            quote!(
                fn calc<T>(s: State<T>) -> Calculated {
                    todo!()
                }
            ),
        );
        assert_eq!(
            errors,
            [
                "unknown argument `foo` for `#[on_invoke]`; expected one of: `event`, `agent`, `description`, `name`, `crate`",
                "duplicate argument `agent` for `#[on_invoke]`",
                "invalid character ' ' in event name `bad event`; use only ASCII letters, digits, `.`, `-` and `_`",
                "`#[on_invoke]` handler must be `async fn`; found `fn`",
                "`#[on_invoke]` handler must not have generic parameters; use concrete types",
                "`#[on_invoke]` handler's first argument must be `Invocation<T>`; found `State<T>`; e.g. `req: Invocation<Calculate>` (extractors such as `State<S>` go after it)",
                "`#[on_invoke]` handler must return `Result<T, E>` where `T: Serialize + JsonSchema` and `E: Into<Box<dyn Error + Send + Sync>>`; found `Calculated`",
            ]
        );
    }

    #[test]
    fn render_types() {
        let cases = [
            (
                quote!(::std::result::Result<A, B>),
                "::std::result::Result<A, B>",
            ),
            (quote!(fn(u8) -> u8), "fn(u8) -> u8"),
            (
                quote!(Box<dyn Fn(&str) -> String + Send + 'static>),
                "Box<dyn Fn(&str) -> String + Send + 'static>",
            ),
            (quote!(*const T), "*const T"),
            (quote!(<T as Trait>::Out), "<T as Trait>::Out"),
        ];
        for (tokens, expected) in cases {
            let ty: Type = syn::parse2(tokens).unwrap();
            assert_eq!(type_to_string(&ty), expected);
        }
    }
}
