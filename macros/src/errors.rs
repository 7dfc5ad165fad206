//! Error collection: gather every error, then report them together (serde's `Ctxt`).

use std::fmt::Display;

/// Collects errors spanned at the user's tokens.
#[derive(Default)]
pub struct Errors {
    all: Option<syn::Error>,
}

impl Errors {
    /// Records an error at the span of `tokens`.
    pub fn spanned<T: quote::ToTokens, M: Display>(&mut self, tokens: T, msg: M) {
        self.push(syn::Error::new_spanned(tokens, msg));
    }

    /// Records an error at a span.
    pub fn at<M: Display>(&mut self, span: proc_macro2::Span, msg: M) {
        self.push(syn::Error::new(span, msg));
    }

    /// Records an existing error.
    pub fn push(&mut self, e: syn::Error) {
        match &mut self.all {
            Some(all) => all.combine(e),
            None => self.all = Some(e),
        }
    }

    /// `Err` with every error when any was recorded.
    pub fn finish(self) -> syn::Result<()> {
        match self.all {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
