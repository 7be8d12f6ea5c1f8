//! One file per command (two small pairs share one): each has its clap arguments and a `run`
//! that returns the exit status or a [`Failure`](crate::input::Failure).

pub(crate) mod convert;
pub(crate) mod evolve;
pub(crate) mod migrate;
pub(crate) mod parse;
pub(crate) mod plugin;
pub(crate) mod schema;
pub(crate) mod validate;
