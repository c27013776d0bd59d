//! Risk levels L0–L5 and the rules that tie them to approval (issue 11).
//!
//! - Approval defaults to **off at L0** and **on above it**.
//! - A tool under approval **shows its risk one band lower**, never below L1: the approval itself
//!   takes one band of risk away, but a gated call is never shown as riskless.
//!
//! Default levels from MCP annotations (hints are untrusted, and missing hints mean destructive and
//! open-world, as the MCP specification says; untrusted hints never lower a tool below what its
//! name says: [`Gating::decide`](crate::Gating::decide)): `readOnlyHint: true` → L0; `destructiveHint: false`
//! → L2; destructive (or unknown) in a closed world (`openWorldHint: false`) → L3; destructive (or
//! unknown) in an open world → L4. L5 is only ever set by configuration.

use rmcp::model::ToolAnnotations;
use serde::{Deserialize, Serialize};

/// A risk level, L0 (harmless) to L5 (highest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct Risk(u8);

impl Risk {
    /// L0: harmless.
    pub const L0: Risk = Risk(0);
    /// L1.
    pub const L1: Risk = Risk(1);
    /// L2.
    pub const L2: Risk = Risk(2);
    /// L3.
    pub const L3: Risk = Risk(3);
    /// L4.
    pub const L4: Risk = Risk(4);
    /// L5: highest.
    pub const L5: Risk = Risk(5);

    /// The level as a number, 0 to 5.
    pub fn level(self) -> u8 {
        self.0
    }

    /// The default level for a tool with these annotations (see the module's documentation).
    pub fn from_annotations(a: Option<&ToolAnnotations>) -> Risk {
        let hint = |f: fn(&ToolAnnotations) -> Option<bool>| a.and_then(f);
        if hint(|a| a.read_only_hint) == Some(true) {
            Risk::L0
        } else if hint(|a| a.destructive_hint) == Some(false) {
            Risk::L2
        } else if hint(|a| a.open_world_hint) == Some(false) {
            Risk::L3
        } else {
            Risk::L4
        }
    }

    /// Whether a tool at this level needs approval when its configuration does not say: off at
    /// L0, on above it.
    pub fn default_approval(self) -> bool {
        self > Risk::L0
    }

    /// The level shown with a request: one band lower for a tool under approval, never below L1;
    /// unchanged for a tool that runs without approval.
    pub fn shown(self, under_approval: bool) -> Risk {
        if under_approval { Risk(self.0.saturating_sub(1).max(1)) } else { self }
    }
}

impl TryFrom<u8> for Risk {
    type Error = String;
    fn try_from(v: u8) -> Result<Self, String> {
        if v <= 5 { Ok(Risk(v)) } else { Err(format!("a risk level is 0 to 5 (L0–L5), got {v}")) }
    }
}

impl From<Risk> for u8 {
    fn from(r: Risk) -> u8 {
        r.0
    }
}

impl std::fmt::Display for Risk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "L{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(read_only: Option<bool>, destructive: Option<bool>, open_world: Option<bool>) -> ToolAnnotations {
        let mut a = ToolAnnotations::default();
        a.read_only_hint = read_only;
        a.destructive_hint = destructive;
        a.open_world_hint = open_world;
        a
    }

    #[test]
    fn approval_is_off_at_l0_and_on_above() {
        assert!(!Risk::L0.default_approval());
        for r in [Risk::L1, Risk::L2, Risk::L3, Risk::L4, Risk::L5] {
            assert!(r.default_approval(), "{r}");
        }
    }

    #[test]
    fn a_gated_tool_shows_one_band_lower_never_below_l1() {
        assert_eq!(Risk::L5.shown(true), Risk::L4);
        assert_eq!(Risk::L4.shown(true), Risk::L3);
        assert_eq!(Risk::L3.shown(true), Risk::L2);
        assert_eq!(Risk::L2.shown(true), Risk::L1);
        assert_eq!(Risk::L1.shown(true), Risk::L1);
        // An L0 tool forced under approval by configuration is still not shown as riskless.
        assert_eq!(Risk::L0.shown(true), Risk::L1);
    }

    #[test]
    fn an_ungated_tool_shows_its_own_level() {
        for r in 0..=5u8 {
            let r = Risk::try_from(r).unwrap();
            assert_eq!(r.shown(false), r);
        }
    }

    #[test]
    fn levels_from_annotations_treat_missing_hints_as_destructive_and_open_world() {
        assert_eq!(Risk::from_annotations(None), Risk::L4);
        assert_eq!(Risk::from_annotations(Some(&ann(None, None, None))), Risk::L4);
        assert_eq!(Risk::from_annotations(Some(&ann(Some(true), None, None))), Risk::L0);
        assert_eq!(Risk::from_annotations(Some(&ann(Some(false), Some(false), None))), Risk::L2);
        assert_eq!(Risk::from_annotations(Some(&ann(None, Some(true), Some(false)))), Risk::L3);
        assert_eq!(Risk::from_annotations(Some(&ann(Some(false), Some(true), Some(true)))), Risk::L4);
    }

    #[test]
    fn levels_above_five_are_refused() {
        assert!(Risk::try_from(6).is_err());
        assert!(serde_json::from_str::<Risk>("6").is_err());
        assert_eq!(serde_json::from_str::<Risk>("5").unwrap(), Risk::L5);
        assert_eq!(Risk::L3.to_string(), "L3");
    }
}
