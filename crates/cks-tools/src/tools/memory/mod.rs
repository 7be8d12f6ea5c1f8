//! Memory from text: remember a text into a session's graph, and forget one again.

mod forget_episode;
mod remember;

use crate::tool::{Listed, listed};

pub(crate) fn tools() -> Vec<Listed> {
    vec![listed(remember::Remember), listed(forget_episode::ForgetEpisode)]
}
