//! The model of segmint's cluster protocols, checked by stateright: see
//! `tests/model/main.rs` in this crate. The crate holds no library code; it exists so
//! that the model is compiled with optimisation (the workspace's
//! `[profile.dev.package.segmint-model]`) while the server's tests are not.
