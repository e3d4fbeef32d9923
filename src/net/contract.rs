//! PROTOCOL.md is the contract: these tests read its tables and lists and
//! compare them with the wire types' own declarations — each enum's variants
//! with their numbers, each struct's fields in order — so that the document
//! and the codec cannot drift apart (issue 30 found the job events numbered
//! differently in each).
//!
//! The code side is read through serde, as the codec reads it: a derived
//! `Deserialize` hands its variant and field names, in declaration order, to
//! the deserializer, and bincode numbers variants by that order (checked
//! below on encoded bytes too). A small deserializer here only records them.

use super::codec::encode_body;
use super::protocol::*;
use serde::de::{self, DeserializeOwned, Visitor};
use std::cell::RefCell;

const DOC: &str = include_str!("../../PROTOCOL.md");

/// What a declaration looks like to serde: an enum's variants or a
/// struct's fields, in order.
#[derive(Debug, Default)]
struct Shape {
    names: Vec<&'static str>,
}

/// A deserializer that fails at once, after noting the names serde asked for.
struct Recorder<'a>(&'a RefCell<Shape>);

#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("recorded")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> de::Deserializer<'de> for Recorder<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.0.borrow_mut().names = variants.to_vec();
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        self.0.borrow_mut().names = fields.to_vec();
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map identifier ignored_any
    }
}

/// `T`'s variants (an enum) or fields (a struct), in declaration order.
fn shape<T: DeserializeOwned>() -> Vec<&'static str> {
    let cell = RefCell::new(Shape::default());
    let _ = T::deserialize(Recorder(&cell));
    cell.into_inner().names
}

/// The document between the first `start` and the next `end` after it.
fn region(start: &str, end: &str) -> &'static str {
    let a = DOC
        .find(start)
        .unwrap_or_else(|| panic!("PROTOCOL.md no longer says {start:?}"));
    let rest = &DOC[a + start.len()..];
    let b = rest
        .find(end)
        .unwrap_or_else(|| panic!("PROTOCOL.md has no {end:?} after {start:?}"));
    &rest[..b]
}

/// Every "`N Name" in `text` (a number, a space, a capitalised name, right
/// after a backtick); with `bullets`, only those that open a list item
/// ("- `N Name"), so a nested enum's list is skipped.
fn numbered(text: &str, bullets: bool) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices('`') {
        if bullets && !text[..i].ends_with("\n- ") {
            continue;
        }
        let after = &text[i + 1..];
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() || !after[digits.len()..].starts_with(' ') {
            continue;
        }
        let name: String = after[digits.len() + 1..]
            .chars()
            .take_while(char::is_ascii_alphanumeric)
            .collect();
        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
            found.push((digits.parse().unwrap(), name));
        }
    }
    found
}

/// The field names of the first `| # | field | ...` table in `text`, in
/// its order (rows "| N | `name` | ...").
fn table_fields(text: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut in_table = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("| # | field |") {
            in_table = true;
            continue;
        }
        if !in_table {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if let Some(name) = cells.get(2).and_then(|c| c.strip_prefix('`')) {
            fields.push(name.trim_end_matches('`').to_string());
        }
    }
    fields
}

/// The names of "`name: Type" in `text`, in order (a struct described in prose).
fn prose_fields(text: &str) -> Vec<String> {
    let mut fields = Vec::new();
    for (i, _) in text.match_indices('`') {
        let after = &text[i + 1..];
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
            .collect();
        if !name.is_empty() && after[name.len()..].starts_with(": ") {
            fields.push(name);
        }
    }
    fields
}

fn assert_enum<T: DeserializeOwned>(rust: &str, documented: Vec<(u32, String)>) {
    let code: Vec<(u32, String)> = shape::<T>()
        .into_iter()
        .enumerate()
        .map(|(i, n)| (u32::try_from(i).unwrap(), n.to_string()))
        .collect();
    assert!(!code.is_empty(), "{rust}: serde gave no variants");
    assert_eq!(
        documented, code,
        "PROTOCOL.md numbers {rust}'s variants differently from the code (left: the document)"
    );
}

fn assert_struct<T: DeserializeOwned>(rust: &str, documented: Vec<String>) {
    let code: Vec<String> = shape::<T>().into_iter().map(String::from).collect();
    assert!(!code.is_empty(), "{rust}: serde gave no fields");
    assert_eq!(
        documented, code,
        "PROTOCOL.md lists {rust}'s fields differently from the code (left: the document)"
    );
}

#[test]
fn the_recorder_reads_what_bincode_numbers() {
    // The variant order serde reports is the index bincode writes first.
    let variants = shape::<JobEventKind>();
    let not_started = JobEventKind::NotStarted { reason: "x".into() };
    let index = variants.iter().position(|v| *v == "NotStarted").unwrap();
    assert_eq!(
        encode_body(&not_started).unwrap()[0],
        u8::try_from(index).unwrap()
    );
    let checkpoint = JobEventKind::Checkpointed {
        size: 1,
        hash: [0; 32],
    };
    let index = variants.iter().position(|v| *v == "Checkpointed").unwrap();
    assert_eq!(
        encode_body(&checkpoint).unwrap()[0],
        u8::try_from(index).unwrap()
    );
}

#[test]
fn protocol_md_numbers_every_enum_as_the_codec_does() {
    assert_enum::<WireState>(
        "WireState",
        numbered(region("`WireState` (enum, no fields):", "\n"), false),
    );
    assert_enum::<ReliabilityResponse>(
        "ReliabilityResponse",
        numbered(
            region(
                "Response `ReliabilityResponse` (enum):",
                "`WireState` (enum",
            ),
            true,
        ),
    );
    assert_enum::<JobRequest>(
        "JobRequest",
        numbered(
            region(
                "Request `JobRequest` (enum):",
                "Response `JobResponse` (enum):",
            ),
            true,
        ),
    );
    assert_enum::<JobEventKind>(
        "JobEventKind",
        numbered(region("`JobEventKind`:", "`GuestUsage` (struct)"), false),
    );
    assert_enum::<OutputName>(
        "OutputName",
        numbered(region("`OutputName`:", "Large outputs"), false),
    );
    assert_enum::<JobResponse>(
        "JobResponse",
        numbered(
            region("Response `JobResponse` (enum):", "In a pool with"),
            true,
        ),
    );
    assert_enum::<RejectReason>(
        "RejectReason",
        numbered(
            region("`1 Rejected(RejectReason)`:", "- `2 EventAck`"),
            false,
        ),
    );
    assert_enum::<RemoteJobState>(
        "RemoteJobState",
        numbered(
            region("`5 JobState(RemoteJobState)`:", "- `6 Cancelled`"),
            false,
        ),
    );
    assert_enum::<DataResponse>(
        "DataResponse",
        numbered(region("holding `DataResponse`:", "3. After"), false),
    );
}

#[test]
fn protocol_md_lists_every_struct_field_in_the_codec_order() {
    assert_struct::<ReliabilityQuery>(
        "ReliabilityQuery",
        table_fields(region("Request `ReliabilityQuery` (struct):", "Response")),
    );
    assert_struct::<ReliabilityAnswer>(
        "ReliabilityAnswer",
        table_fields(region("`0 Answer(ReliabilityAnswer)`:", "- `1 Unavailable")),
    );
    assert_struct::<JobSubmit>(
        "JobSubmit",
        table_fields(region(
            "`0 Submit(JobSubmit)`",
            "`CheckpointOrder` (struct)",
        )),
    );
    assert_struct::<DataRequest>(
        "DataRequest",
        table_fields(region("holding\n   `DataRequest`:", "2. The consumer")),
    );
    assert_struct::<HostSummary>(
        "HostSummary",
        table_fields(region("`HostSummary` (struct):", "`WireLadder` (struct)")),
    );
    assert_struct::<WireLadder>(
        "WireLadder",
        prose_fields(region("`WireLadder` (struct):", "A receiver clamps")),
    );
    assert_struct::<SummaryWithImages>(
        "SummaryWithImages",
        table_fields(region(
            "`SummaryWithImages` (struct), format 2:",
            "`SummaryWithBasis` (struct)",
        )),
    );
    assert_struct::<SummaryWithBasis>(
        "SummaryWithBasis",
        table_fields(region("`SummaryWithBasis` (struct), format 3", "**When.**")),
    );
    assert_struct::<Announcement>(
        "Announcement",
        table_fields(region("`Announcement` (struct),", "## Discovery")),
    );
    assert_struct::<CheckpointOrder>(
        "CheckpointOrder",
        prose_fields(region("`CheckpointOrder` (struct):", "`InputRef` (struct)")),
    );
    assert_struct::<InputRef>(
        "InputRef",
        prose_fields(region("`InputRef` (struct):", "No input travels")),
    );
    assert_struct::<ImageRef>(
        "ImageRef",
        prose_fields(region("`ImageRef` (struct):", "- `6 SubmitInLayers")),
    );
    assert_struct::<LayeredImageRef>(
        "LayeredImageRef",
        prose_fields(region(
            "`LayeredImageRef` (struct):",
            "`Query` and `Cancel` were added",
        )),
    );
    assert_struct::<GuestUsage>(
        "GuestUsage",
        prose_fields(region("`GuestUsage` (struct):", "Version 3 added")),
    );
    assert_struct::<DigestRequest>(
        "DigestRequest",
        prose_fields(region(
            "`DigestRequest` (struct):",
            "`DigestResponse` (struct)",
        )),
    );
    assert_struct::<DigestResponse>(
        "DigestResponse",
        prose_fields(region(
            "`DigestResponse` (struct):",
            "`DigestEntry` (struct)",
        )),
    );
    assert_struct::<DigestEntry>(
        "DigestEntry",
        prose_fields(region(
            "`DigestEntry` (struct):",
            "A receiver refuses an answer",
        )),
    );
}

#[test]
fn the_parsers_see_a_wrong_number() {
    // The tests above can fail: a swapped pair in a list is seen.
    let swapped = "`JobEventKind`: `0 Started`, `2 Reniced`, `1 Suspended`";
    let found = numbered(swapped, false);
    assert_eq!(
        found,
        vec![
            (0, "Started".to_string()),
            (2, "Reniced".to_string()),
            (1, "Suspended".to_string())
        ]
    );
    assert_ne!(
        found[..],
        [
            (0, "Started".to_string()),
            (1, "Reniced".to_string()),
            (2, "Suspended".to_string())
        ]
    );
    let table = "| # | field | type | meaning |\n|---|---|---|---|\n| 1 | `b` | u8 | x |\n| 2 | `a` | u8 | y |\n";
    assert_eq!(table_fields(table), vec!["b", "a"]);
}
