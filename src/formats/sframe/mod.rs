//! SFrame (`.sframe`) reader, versions 1 to 3.

mod row;
pub use row::{Abi, CfaRule, RegRule, Row};
