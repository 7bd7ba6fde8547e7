//! Reading a JSON snapshot object by object.
//!
//! `kubectl get pods,nodes,... -A -o json` prints one `List` whose `items` hold every object; for a large
//! cluster that file is hundreds of megabytes and, parsed whole, a JSON tree several times that. Here each item
//! is parsed, handed to the snapshot (which keeps only what decisions read) and dropped before the next, so
//! memory grows with what is kept, not with the file.
//!
//! The file is read in blocks of [`BLOCK`] bytes and each value parsed from the block in memory: serde_json
//! parses a slice several times faster than a reader (which it takes byte by byte), and on a 5,000-node dump
//! parsing was most of `karpenter disrupt`'s time. Only the list's own punctuation (`{`, the keys, `:`, `,`,
//! `[`, `]`) is read here; every key and value is serde_json's. A value cut by the end of a block is parsed
//! again once the next block is in.

use std::{fmt, io::Read};

use karpenter_core::snapshot::{Snapshot, SnapshotNote};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Bytes read per refill: large enough that few values straddle two blocks, small beside the snapshot.
const BLOCK: usize = 8 << 20;

/// How a streamed read ended.
pub struct StreamOutcome {
    /// Objects (list items, or whole top-level objects) handed to the snapshot.
    pub objects: usize,
    /// The error that stopped the read, if any; objects before it were kept.
    pub error: Option<StreamError>,
}

/// Why a read stopped: the file could not be read, or is not the JSON expected, at a line and column of the
/// file (1-based, as serde_json counts them).
#[derive(Debug)]
pub struct StreamError {
    message: String,
    line: usize,
    column: usize,
    io: bool,
}

impl StreamError {
    pub fn line(&self) -> usize {
        self.line
    }

    pub fn column(&self) -> usize {
        self.column
    }

    /// Whether reading the file failed (rather than its contents being wrong).
    pub fn is_io(&self) -> bool {
        self.io
    }
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.io {
            f.write_str(&self.message)
        } else {
            write!(f, "{} at line {} column {}", self.message, self.line, self.column)
        }
    }
}

impl std::error::Error for StreamError {}

/// Reads one or more JSON values from `reader` into `snapshot`: a value with an `items` array has each item
/// added as it is parsed; any other value is added whole.
pub fn read_json(
    reader: impl Read,
    source: &str,
    snapshot: &mut Snapshot,
    notes: &mut Vec<SnapshotNote>,
) -> StreamOutcome {
    read_json_in_blocks(reader, BLOCK, source, snapshot, notes)
}

fn read_json_in_blocks(
    reader: impl Read,
    block: usize,
    source: &str,
    snapshot: &mut Snapshot,
    notes: &mut Vec<SnapshotNote>,
) -> StreamOutcome {
    let mut sink = Sink {
        snapshot,
        notes,
        source,
        objects: 0,
    };
    let mut input = Blocks::new(reader, block);
    let error = input.top_level(&mut sink).err();
    StreamOutcome {
        objects: sink.objects,
        error,
    }
}

struct Sink<'a> {
    snapshot: &'a mut Snapshot,
    notes: &'a mut Vec<SnapshotNote>,
    source: &'a str,
    objects: usize,
}

impl Sink<'_> {
    fn add(&mut self, value: Value) {
        self.objects += 1;
        let (n, source) = (self.objects, self.source);
        self.snapshot
            .add_value(value, &|| format!("object {n} of {source}"), self.notes);
    }
}

/// The file as blocks in memory: `buf[pos..]` is what is not parsed yet; `line` and `column` (0-based) are
/// where `buf[pos]` sits in the file, so errors name the file's line, not the block's.
struct Blocks<R> {
    reader: R,
    block: usize,
    buf: Vec<u8>,
    pos: usize,
    /// The reader has nothing more.
    done: bool,
    line: usize,
    column: usize,
}

impl<R: Read> Blocks<R> {
    fn new(reader: R, block: usize) -> Self {
        Self {
            reader,
            block: block.max(1),
            buf: Vec::new(),
            pos: 0,
            done: false,
            line: 1,
            column: 0,
        }
    }

    /// Drops what was parsed and appends at least `want` more bytes (fewer at the end of the file).
    fn refill(&mut self, want: usize) -> Result<(), StreamError> {
        self.buf.drain(..self.pos);
        self.pos = 0;
        let target = self.buf.len() + want;
        while self.buf.len() < target {
            let start = self.buf.len();
            self.buf.resize(target, 0);
            match self.reader.read(&mut self.buf[start..]) {
                Ok(0) => {
                    self.buf.truncate(start);
                    self.done = true;
                    break;
                }
                Ok(n) => self.buf.truncate(start + n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => self.buf.truncate(start),
                Err(e) => {
                    self.buf.truncate(start);
                    return Err(StreamError {
                        message: e.to_string(),
                        line: self.line,
                        column: self.column + 1,
                        io: true,
                    });
                }
            }
        }
        Ok(())
    }

    /// Moves past `n` parsed bytes, keeping the line and column.
    fn advance(&mut self, n: usize) {
        let consumed = &self.buf[self.pos..self.pos + n];
        match consumed.iter().rposition(|&b| b == b'\n') {
            Some(last) => {
                self.line += consumed.iter().filter(|&&b| b == b'\n').count();
                self.column = n - last - 1;
            }
            None => self.column += n,
        }
        self.pos += n;
    }

    /// The next byte that is not whitespace, not consumed; `None` at the end of the file.
    fn peek(&mut self) -> Result<Option<u8>, StreamError> {
        loop {
            let rest = &self.buf[self.pos..];
            match rest.iter().position(|b| !b.is_ascii_whitespace()) {
                Some(at) => {
                    self.advance(at);
                    return Ok(Some(self.buf[self.pos]));
                }
                None => {
                    let all = rest.len();
                    self.advance(all);
                    if self.done {
                        return Ok(None);
                    }
                    self.refill(self.block)?;
                }
            }
        }
    }

    /// An error at the current place.
    fn error_here(&self, message: impl Into<String>) -> StreamError {
        StreamError {
            message: message.into(),
            line: self.line,
            column: self.column + 1,
            io: false,
        }
    }

    /// `expected` is next: consumes it; otherwise an error saying what was wanted.
    fn expect_one_of(&mut self, expected: &[u8], what: &str) -> Result<u8, StreamError> {
        match self.peek()? {
            Some(b) if expected.contains(&b) => {
                self.advance(1);
                Ok(b)
            }
            Some(b) => Err(self.error_here(format!("expected {what}, found {:?}", b as char))),
            None => Err(self.error_here(format!("EOF while parsing: expected {what}"))),
        }
    }

    /// The next JSON value, parsed by serde_json from the block; a value the block's end cuts (or may cut: a
    /// number ending exactly there) is parsed again with more of the file read.
    fn value<T: DeserializeOwned>(&mut self) -> Result<T, StreamError> {
        let mut want = self.block;
        loop {
            let rest = &self.buf[self.pos..];
            let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<T>();
            let parsed = values.next();
            let used = values.byte_offset();
            match parsed {
                Some(Ok(value)) if used < rest.len() || self.done => {
                    self.advance(used);
                    return Ok(value);
                }
                Some(Err(e)) if !e.is_eof() || self.done => {
                    // serde_json counts from the block's start; the file's line and column are ours plus that.
                    let (line, column) = if e.line() <= 1 {
                        (self.line, self.column + e.column())
                    } else {
                        (self.line + e.line() - 1, e.column())
                    };
                    let message = e.to_string();
                    let message = message
                        .rsplit_once(" at line ")
                        .map_or(message.as_str(), |(m, _)| m)
                        .to_string();
                    return Err(StreamError {
                        message,
                        line,
                        column,
                        io: false,
                    });
                }
                None if self.done => return Err(self.error_here("EOF while parsing a value")),
                // Cut by the block's end (or only whitespace left): read more, each time more than before, so
                // one huge value costs a few parses, not one per block.
                _ => {
                    self.refill(want)?;
                    want = want.saturating_mul(2);
                }
            }
        }
    }

    /// Every top-level value: a map is read key by key so that `items` can be streamed; a bare array's
    /// elements are objects.
    fn top_level(&mut self, sink: &mut Sink<'_>) -> Result<(), StreamError> {
        loop {
            match self.peek()? {
                None => return Ok(()),
                Some(b'{') => {
                    self.advance(1);
                    self.object(sink)?;
                }
                Some(b'[') => {
                    self.advance(1);
                    self.items(sink)?;
                }
                Some(b) => {
                    return Err(self.error_here(format!(
                        "expected a Kubernetes object or list, found {:?}",
                        b as char
                    )));
                }
            }
        }
    }

    /// The rest of an object whose `{` was read: `items` streamed, the object added whole when it has none.
    fn object(&mut self, sink: &mut Sink<'_>) -> Result<(), StreamError> {
        let mut rest = Map::new();
        let mut streamed = false;
        if self.peek()? == Some(b'}') {
            self.advance(1);
        } else {
            loop {
                if self.peek()? != Some(b'"') {
                    self.expect_one_of(b"\"", "a key")?;
                }
                let key: String = self.value()?;
                self.expect_one_of(b":", "':'")?;
                if key == "items" && self.peek()? == Some(b'[') {
                    self.advance(1);
                    self.items(sink)?;
                    streamed = true;
                } else {
                    let value: Value = self.value()?;
                    rest.insert(key, value);
                }
                if self.expect_one_of(b",}", "',' or '}'")? == b'}' {
                    break;
                }
            }
        }
        if !streamed {
            sink.add(Value::Object(rest));
        }
        Ok(())
    }

    /// The rest of a list whose `[` was read, each element added as it is parsed.
    fn items(&mut self, sink: &mut Sink<'_>) -> Result<(), StreamError> {
        if self.peek()? == Some(b']') {
            self.advance(1);
            return Ok(());
        }
        loop {
            let item: Value = self.value()?;
            sink.add(item);
            if self.expect_one_of(b",]", "',' or ']'")? == b']' {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Snapshot, Vec<SnapshotNote>, StreamOutcome) {
        let mut snapshot = Snapshot::default();
        let mut notes = Vec::new();
        let outcome = read_json(text.as_bytes(), "f.json", &mut snapshot, &mut notes);
        (snapshot, notes, outcome)
    }

    #[test]
    fn list_items_are_read_whatever_the_key_order() {
        let (snap, notes, outcome) = read(
            r#"{"apiVersion": "v1", "items": [
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}},
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": []}}
            ], "kind": "List", "metadata": {"resourceVersion": ""}}"#,
        );
        assert!(outcome.error.is_none());
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((snap.nodes.len(), snap.pods.len()), (1, 1));
        assert_eq!(outcome.objects, 2);
    }

    #[test]
    fn single_objects_streams_and_nested_lists() {
        let (snap, notes, outcome) = read(
            r#"{"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "a"}}
               {"kind": "NodeList", "items": [{"kind": "Node", "metadata": {"name": "n1"}}]}
               [{"kind": "Namespace", "metadata": {"name": "b"}}]"#,
        );
        assert!(outcome.error.is_none(), "{:?}", outcome.error);
        assert!(notes.is_empty(), "{notes:?}");
        assert_eq!((snap.namespaces.len(), snap.nodes.len()), (2, 1));
    }

    #[test]
    fn a_broken_file_keeps_what_came_before_the_error() {
        let (snap, notes, outcome) = read(
            r#"{"kind": "List", "items": [{"kind": "Node", "metadata": {"name": "n1"}}, {"kind": "Node", "metad"#,
        );
        assert_eq!(snap.nodes.len(), 1);
        assert!(notes.is_empty(), "{notes:?}");
        let error = outcome.error.map(|e| e.to_string()).unwrap_or_default();
        assert!(error.contains("EOF"), "{error}");
    }

    /// Every block size reads the same objects: a key, an item or a number cut by a block's end is parsed
    /// again with the next block in, and errors name the file's line and column, not the block's.
    #[test]
    fn values_cut_by_a_block_s_end_are_read_whole() {
        let text = r#"{"apiVersion": "v1", "count": 12345, "items": [
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "\"quoted\""}}},
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"}, "spec": {"containers": []}}
            ], "kind": "List"}
            {"kind": "Namespace", "metadata": {"name": "a"}}
            [{"kind": "Namespace", "metadata": {"name": "b"}}]"#;
        for block in 1..=text.len() + 1 {
            let mut snap = Snapshot::default();
            let mut notes = Vec::new();
            let outcome = read_json_in_blocks(text.as_bytes(), block, "f.json", &mut snap, &mut notes);
            assert!(outcome.error.is_none(), "block {block}: {:?}", outcome.error);
            assert!(notes.is_empty(), "block {block}: {notes:?}");
            assert_eq!(
                (snap.nodes.len(), snap.pods.len(), snap.namespaces.len()),
                (1, 1, 2),
                "block {block}"
            );
            assert_eq!(outcome.objects, 4, "block {block}");
        }
        let broken = "{\"kind\": \"List\", \"items\": [\n  {\"kind\": \"Node\", \"metadata\": {\"name\": \"n1\"}},\n  {\"kind\": \"Node\" \"metadata\"";
        for block in [1, 3, 16, 1 << 20] {
            let mut snap = Snapshot::default();
            let mut notes = Vec::new();
            let outcome = read_json_in_blocks(broken.as_bytes(), block, "f.json", &mut snap, &mut notes);
            let error = outcome.error.expect("a syntax error");
            assert_eq!((error.line(), error.column()), (3, 19), "block {block}: {error}");
            assert_eq!(snap.nodes.len(), 1, "block {block}");
        }
    }

    #[test]
    fn a_malformed_item_is_a_note_naming_it() {
        let (snap, notes, _) = read(
            r#"{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "bad", "namespace": "d"},
                "spec": {"containers": [{"name": "c", "ports": [{"containerPort": "x"}]}]}}]}"#,
        );
        assert!(snap.pods.is_empty());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert_eq!(notes[0].object, "Pod d/bad");
    }
}
