//! # aria-codec
