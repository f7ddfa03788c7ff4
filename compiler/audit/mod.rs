//! Audit: what the commands that answer questions about a compiled table
//! (`explain`, `query`, `diff`, `plot`, `export`, `verify`, in [`crate::cmd`])
//! share, so that no command imports another. They all read a table
//! through `dyncc-tables`' validating reader ([`files`]) and, where they need
//! "what does the plugin do over a whole region", resolve it the way the
//! plugin does: first matching context per (nodes, ranks per node), then
//! the rule of the size bucket ([`plane`]). What they print is spelled
//! once: names ([`names`]), words ([`text`]), what a decision rests on and
//! gains ([`evidence`]), JSON ([`json`]) and colours ([`colour`]); a summary
//! tree is checked against the plugin once ([`agreement`]); the exploration
//! plan and the chance a job tries each candidate, by the runtime's rule
//! ([`explore`]); what jobs' traces measured near a call ([`traced`]).

pub mod agreement;
pub mod colour;
pub mod coverage;
pub mod evidence;
pub mod explore;
pub mod files;
pub mod json;
pub mod names;
pub mod plane;
pub mod text;
pub mod traced;

#[cfg(test)]
pub(crate) mod testutil;
