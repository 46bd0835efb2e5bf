//! One module per command of the binary; each has a `run` taking its flags.

pub mod cluster;
pub mod compact;
pub mod describe;
pub mod format;
pub mod front;
pub mod fsck;
pub mod grow;
pub mod init;
pub mod key;
pub mod node;
pub mod recover;
pub mod serve;
pub mod stats;
pub mod user;
