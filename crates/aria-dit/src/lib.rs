//! # aria-dit
