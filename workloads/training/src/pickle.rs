//! A restricted unpickler: a small pickle virtual machine that builds plain data and never
//! executes pickle code.
//!
//! It reads what `pickle.dump` writes for dicts, lists, tuples, sets, ints, floats, strings,
//! bytes, `None` and bools at protocols 0–5, which is everything a
//! `torch.cuda.memory._dump_snapshot` file holds. Every opcode that could name,
//! import, call or build a Python object — `GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `INST`,
//! `OBJ`, `NEWOBJ`, `NEWOBJ_EX`, `PERSID`, `BINPERSID`, `EXT1/2/4` — is refused with
//! [`PickleError::Forbidden`], naming the opcode and its byte offset. So are out-of-band
//! buffers (`NEXT_BUFFER`, `READONLY_BUFFER`). The protocol-0 quoted byte string `STRING`
//! (Python 2 `str`) is not parsed; Python 3 writes `str` as `UNICODE` at protocol 0, and bytes
//! at protocol 0 only through `REDUCE`, which is refused anyway.
//!
//! **Bounded memory.** Every length prefix is checked against the bytes left in the input
//! before anything is allocated, so a file can never ask for more than its own size; the input
//! size, the number of objects, the stack and the mark depth are capped by [`Limits`]. Objects
//! live in an arena and memo `GET`s share them by index instead of copying, so a file that
//! references one list a million times costs a million indices, not a million lists, and a
//! cycle (a list appended to itself) is harmless. Nothing here recurses over the data, so deep
//! nesting cannot overflow the Rust stack.
//!
//! ```
//! use alloclab_training::pickle::{Pickle, Limits};
//! // pickle.dumps({"a": [1, 2]}, protocol=2)
//! let bytes = b"\x80\x02}q\x00X\x01\x00\x00\x00aq\x01]q\x02(K\x01K\x02es.";
//! let p = Pickle::parse(bytes, &Limits::default()).unwrap();
//! let a = p.root().get("a").unwrap().as_list().unwrap();
//! assert_eq!(a.iter().map(|v| v.as_i64().unwrap()).collect::<Vec<_>>(), [1, 2]);
//! ```

use core::fmt;
use std::collections::HashMap;

/// Caps on what a pickle may make the parser hold.
///
/// The parser's memory is at most the input, about 32 bytes per object plus the bytes of its
/// strings (themselves bounded by the input), 8 bytes per stack slot and open mark, and about
/// 24 bytes per memo entry: with the defaults, a few GiB at worst for a 1 GiB file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest input accepted, in bytes.
    pub max_input_bytes: usize,
    /// Most objects (every scalar, string and container counts one).
    pub max_objects: usize,
    /// Deepest the value stack may grow.
    pub max_stack: usize,
    /// Most `MARK`s open at once (the nesting depth of `(`…`)` groups).
    pub max_marks: usize,
    /// Most memo entries.
    pub max_memo: usize,
}

impl Default for Limits {
    /// 1 GiB of input, 64 Mi objects, a stack of 1 Mi, 1024 open marks, 16 Mi memo entries.
    fn default() -> Self {
        Limits {
            max_input_bytes: 1 << 30,
            max_objects: 64 << 20,
            max_stack: 1 << 20,
            max_marks: 1024,
            max_memo: 16 << 20,
        }
    }
}

/// Why a pickle was not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PickleError {
    /// An opcode that would import, call or build Python objects (or read out-of-band
    /// data); such a file is refused, never run.
    Forbidden {
        /// The opcode's name in `pickletools`.
        opcode: &'static str,
        /// Byte offset of the opcode.
        offset: usize,
    },
    /// A byte that is no opcode this reader knows.
    UnknownOpcode {
        /// The byte.
        byte: u8,
        /// Its offset.
        offset: usize,
    },
    /// The input ended inside an opcode or before `STOP`.
    Truncated {
        /// Offset of the opcode being read.
        offset: usize,
        /// Bytes it needed beyond the end.
        needed: u64,
    },
    /// A limit of [`Limits`] was reached.
    LimitExceeded {
        /// Which limit (`max_input_bytes`, `max_objects`, `max_stack`, `max_marks`, `max_memo`).
        limit: &'static str,
        /// Offset of the opcode that hit it.
        offset: usize,
    },
    /// The opcodes do not make sense (popping an empty stack, a memo index never stored,
    /// appending to a non-list, a protocol above 5, ...).
    Malformed {
        /// Offset of the opcode.
        offset: usize,
        /// What was wrong.
        what: String,
    },
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Forbidden { opcode, offset } => write!(
                f,
                "pickle opcode {opcode} at offset {offset} is refused: it would import, call or build Python objects or read out-of-band data (only plain data is read)"
            ),
            Self::UnknownOpcode { byte, offset } => {
                write!(f, "unknown pickle opcode 0x{byte:02x} at offset {offset}")
            }
            Self::Truncated { offset, needed } => write!(
                f,
                "pickle truncated: the opcode at offset {offset} needs {needed} more byte(s) than the input has"
            ),
            Self::LimitExceeded { limit, offset } => {
                write!(f, "pickle exceeds {limit} at offset {offset}")
            }
            Self::Malformed { offset, what } => {
                write!(f, "malformed pickle at offset {offset}: {what}")
            }
        }
    }
}

impl std::error::Error for PickleError {}

/// Index of an object in a [`Pickle`]'s arena.
pub type ObjId = usize;

/// One object of the arena. Containers hold indices of other objects.
#[derive(Clone, Debug, PartialEq)]
pub enum Object {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An int (pickled ints of up to 16 bytes; longer ones are refused as malformed).
    Int(i128),
    /// A float.
    Float(f64),
    /// A str.
    Str(String),
    /// bytes, bytearray, or a protocol-1 `BINSTRING` (Python 2 str).
    Bytes(Vec<u8>),
    /// A list.
    List(Vec<ObjId>),
    /// A tuple.
    Tuple(Vec<ObjId>),
    /// A dict's entries in the order they were set. A key set twice appears twice (no
    /// deduplication, so that a hostile file cannot make the parse quadratic);
    /// [`Value::get`] returns the last, as Python would.
    Dict(Vec<(ObjId, ObjId)>),
    /// A set or frozenset.
    Set(Vec<ObjId>),
}

/// A parsed pickle: the arena of objects and the root.
#[derive(Clone, Debug, PartialEq)]
pub struct Pickle {
    objects: Vec<Object>,
    root: ObjId,
    protocol: u8,
}

/// A borrowed view of one object, with typed accessors.
#[derive(Clone, Copy, Debug)]
pub struct Value<'a> {
    pickle: &'a Pickle,
    id: ObjId,
}

impl Pickle {
    /// Runs the restricted VM over `bytes`.
    ///
    /// # Errors
    ///
    /// A [`PickleError`] for a forbidden or unknown opcode, a truncated or malformed input,
    /// or an input beyond `limits`.
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Pickle, PickleError> {
        Vm::new(bytes, limits).run()
    }

    /// The object `pickle.load` would return.
    pub fn root(&self) -> Value<'_> {
        self.value(self.root)
    }

    /// The view of object `id`.
    ///
    /// # Panics
    ///
    /// If `id` is not an index of this pickle's arena.
    pub fn value(&self, id: ObjId) -> Value<'_> {
        assert!(id < self.objects.len(), "object {id} is not in the arena");
        Value { pickle: self, id }
    }

    /// The arena's objects.
    pub fn objects(&self) -> &[Object] {
        &self.objects
    }

    /// The protocol named by the `PROTO` opcode (0 or 1 when there is none).
    pub fn protocol(&self) -> u8 {
        self.protocol
    }
}

impl<'a> Value<'a> {
    /// The object.
    pub fn object(&self) -> &'a Object {
        &self.pickle.objects[self.id]
    }

    /// Its index in the arena.
    pub fn id(&self) -> ObjId {
        self.id
    }

    /// Whether it is `None`.
    pub fn is_none(&self) -> bool {
        matches!(self.object(), Object::None)
    }

    /// An int (or bool) that fits an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        match *self.object() {
            Object::Int(v) => i64::try_from(v).ok(),
            Object::Bool(b) => Some(i64::from(b)),
            _ => None,
        }
    }

    /// A non-negative int that fits a `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self.object() {
            Object::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float, or an int as a float.
    pub fn as_f64(&self) -> Option<f64> {
        match *self.object() {
            Object::Float(v) => Some(v),
            Object::Int(v) => Some(v as f64),
            _ => None,
        }
    }

    /// A bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self.object() {
            Object::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A str.
    pub fn as_str(&self) -> Option<&'a str> {
        match self.object() {
            Object::Str(s) => Some(s),
            _ => None,
        }
    }

    /// bytes.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match self.object() {
            Object::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The items of a list or tuple.
    pub fn as_list(&self) -> Option<Vec<Value<'a>>> {
        match self.object() {
            Object::List(v) | Object::Tuple(v) => Some(self.wrap(v)),
            _ => None,
        }
    }

    /// The entries of a dict.
    pub fn as_dict(&self) -> Option<Vec<(Value<'a>, Value<'a>)>> {
        match self.object() {
            Object::Dict(v) => Some(
                v.iter()
                    .map(|&(k, x)| (self.pickle.value(k), self.pickle.value(x)))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// The value under the str key `key` of a dict (`None` if this is no dict or the key is
    /// absent).
    pub fn get(&self, key: &str) -> Option<Value<'a>> {
        match self.object() {
            Object::Dict(v) => v
                .iter()
                .rfind(|&&(k, _)| matches!(&self.pickle.objects[k], Object::Str(s) if s == key))
                .map(|&(_, x)| self.pickle.value(x)),
            _ => None,
        }
    }

    /// The Python type name of the object (`"dict"`, `"int"`, ...), for error messages.
    pub fn type_name(&self) -> &'static str {
        type_of(self.object())
    }

    /// Views of the objects `ids`.
    fn wrap(&self, ids: &[ObjId]) -> Vec<Value<'a>> {
        ids.iter().map(|&i| self.pickle.value(i)).collect()
    }
}

/// Names of the refused opcodes.
fn forbidden_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'i' => "INST",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        b'S' => "STRING",
        _ => return None,
    })
}

/// Whether a refused opcode is refused because it builds objects or reads out-of-band data
/// (`STRING`, the one other refused opcode, is merely not parsed).
fn refused_for_safety(op: u8) -> bool {
    matches!(
        op,
        b'c' | 0x93
            | b'R'
            | b'b'
            | b'i'
            | b'o'
            | 0x81
            | 0x92
            | b'P'
            | b'Q'
            | 0x82
            | 0x83
            | 0x84
            | 0x97
            | 0x98
    )
}

struct Vm<'b> {
    input: &'b [u8],
    pos: usize,
    op_at: usize,
    limits: Limits,
    objects: Vec<Object>,
    stack: Vec<ObjId>,
    marks: Vec<usize>,
    memo: HashMap<u64, ObjId>,
    protocol: u8,
}

impl<'b> Vm<'b> {
    fn new(input: &'b [u8], limits: &Limits) -> Self {
        Vm {
            input,
            pos: 0,
            op_at: 0,
            limits: *limits,
            objects: Vec::new(),
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
            protocol: 0,
        }
    }

    fn malformed<T>(&self, what: impl Into<String>) -> Result<T, PickleError> {
        Err(PickleError::Malformed {
            offset: self.op_at,
            what: what.into(),
        })
    }

    fn limit<T>(&self, limit: &'static str) -> Result<T, PickleError> {
        Err(PickleError::LimitExceeded {
            limit,
            offset: self.op_at,
        })
    }

    /// The next `n` bytes, checked against the end of the input before anything is allocated.
    fn take(&mut self, n: u64) -> Result<&'b [u8], PickleError> {
        let left = (self.input.len() - self.pos) as u64;
        if n > left {
            return Err(PickleError::Truncated {
                offset: self.op_at,
                needed: n - left,
            });
        }
        let s = &self.input[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u64, PickleError> {
        let b = self.take(2)?;
        Ok(u64::from(u16::from_le_bytes([b[0], b[1]])))
    }

    fn u32(&mut self) -> Result<u64, PickleError> {
        let b = self.take(4)?;
        Ok(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
    }

    fn u64(&mut self) -> Result<u64, PickleError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// The bytes up to the next newline (which is consumed, not returned).
    fn line(&mut self) -> Result<&'b [u8], PickleError> {
        let rest = &self.input[self.pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => Err(PickleError::Truncated {
                offset: self.op_at,
                needed: 1,
            }),
        }
    }

    /// A decimal line as an int (`INT`, `LONG` with its trailing `L`, `PUT`, `GET`).
    fn decimal(&mut self, strip_l: bool) -> Result<i128, PickleError> {
        let mut line = self.line()?;
        if strip_l && line.last() == Some(&b'L') {
            line = &line[..line.len() - 1];
        }
        match core::str::from_utf8(line)
            .ok()
            .and_then(|t| t.parse::<i128>().ok())
        {
            Some(v) => Ok(v),
            None => self.malformed("a text int that is not a decimal of at most 38 digits"),
        }
    }

    /// A memo key of `PUT` / `GET`.
    fn text_key(&mut self) -> Result<u64, PickleError> {
        let v = self.decimal(false)?;
        match u64::try_from(v) {
            Ok(k) => Ok(k),
            Err(_) => self.malformed("a negative memo index"),
        }
    }

    /// `UNICODE`: a line in raw-unicode-escape (`\uXXXX`, `\UXXXXXXXX`, other bytes Latin-1).
    fn raw_unicode(&mut self) -> Result<(), PickleError> {
        let line = self.line()?;
        let mut out = String::with_capacity(line.len());
        let mut i = 0;
        while i < line.len() {
            let b = line[i];
            let digits = match (b, line.get(i + 1)) {
                (b'\\', Some(b'u')) => 4,
                (b'\\', Some(b'U')) => 8,
                _ => 0,
            };
            if digits == 0 {
                out.push(char::from(b));
                i += 1;
                continue;
            }
            let hex = line
                .get(i + 2..i + 2 + digits)
                .and_then(|h| core::str::from_utf8(h).ok())
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32);
            match hex {
                Some(c) => out.push(c),
                None => return self.malformed("a bad \\u escape in a UNICODE string"),
            }
            i += 2 + digits;
        }
        self.push(Object::Str(out))
    }

    fn alloc(&mut self, o: Object) -> Result<ObjId, PickleError> {
        if self.objects.len() >= self.limits.max_objects {
            return self.limit("max_objects");
        }
        self.objects.push(o);
        Ok(self.objects.len() - 1)
    }

    fn push_id(&mut self, id: ObjId) -> Result<(), PickleError> {
        if self.stack.len() >= self.limits.max_stack {
            return self.limit("max_stack");
        }
        self.stack.push(id);
        Ok(())
    }

    fn push(&mut self, o: Object) -> Result<(), PickleError> {
        let id = self.alloc(o)?;
        self.push_id(id)
    }

    fn pop(&mut self) -> Result<ObjId, PickleError> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return self.malformed("pop below the topmost MARK");
        }
        match self.stack.pop() {
            Some(id) => Ok(id),
            None => self.malformed("pop from an empty stack"),
        }
    }

    fn top(&self) -> Result<ObjId, PickleError> {
        match self.stack.last() {
            Some(&id) if self.marks.last().is_none_or(|&m| m < self.stack.len()) => Ok(id),
            _ => self.malformed("the stack is empty above the topmost MARK"),
        }
    }

    /// Pops everything above the topmost mark, and the mark.
    fn pop_mark(&mut self) -> Result<Vec<ObjId>, PickleError> {
        match self.marks.pop() {
            Some(m) => Ok(self.stack.split_off(m)),
            None => self.malformed("no MARK to pop to"),
        }
    }

    fn memo_put(&mut self, key: u64) -> Result<(), PickleError> {
        let top = self.top()?;
        if !self.memo.contains_key(&key) && self.memo.len() >= self.limits.max_memo {
            return self.limit("max_memo");
        }
        self.memo.insert(key, top);
        Ok(())
    }

    fn memo_get(&mut self, key: u64) -> Result<(), PickleError> {
        match self.memo.get(&key) {
            Some(&id) => self.push_id(id),
            None => self.malformed(format!("memo index {key} was never stored")),
        }
    }

    fn string(&mut self, n: u64) -> Result<(), PickleError> {
        let b = self.take(n)?;
        match core::str::from_utf8(b) {
            Ok(s) => self.push(Object::Str(s.to_owned())),
            Err(_) => self.malformed("a unicode string is not UTF-8"),
        }
    }

    fn bytes(&mut self, n: u64) -> Result<(), PickleError> {
        let b = self.take(n)?.to_vec();
        self.push(Object::Bytes(b))
    }

    fn long(&mut self, n: u64) -> Result<(), PickleError> {
        if n > 16 {
            // Check the input holds it first, so a huge length is reported as truncation.
            self.take(n)?;
            return self.malformed(format!("an int of {n} bytes (at most 16 are read)"));
        }
        let b = self.take(n)?;
        let mut v: i128 = 0;
        for (i, &x) in b.iter().enumerate() {
            v |= i128::from(x) << (8 * i);
        }
        // Sign-extend from the top byte (two's complement, little endian).
        if n > 0 && n < 16 && b[n as usize - 1] & 0x80 != 0 {
            v -= 1i128 << (8 * n);
        }
        self.push(Object::Int(v))
    }

    fn list_mut(&mut self, id: ObjId) -> Result<&mut Vec<ObjId>, PickleError> {
        let offset = self.op_at;
        match &mut self.objects[id] {
            Object::List(v) => Ok(v),
            other => Err(PickleError::Malformed {
                offset,
                what: format!("append to a {} (not a list)", type_of(other)),
            }),
        }
    }

    fn set_items(&mut self, dict: ObjId, items: Vec<ObjId>) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return self.malformed("SETITEMS with an odd number of items");
        }
        if let Some(&k) = items.iter().step_by(2).find(|&&k| {
            matches!(
                self.objects[k],
                Object::List(_) | Object::Dict(_) | Object::Set(_)
            )
        }) {
            let t = type_of(&self.objects[k]);
            return self.malformed(format!("an unhashable dict key (a {t})"));
        }
        let Object::Dict(entries) = &mut self.objects[dict] else {
            let t = type_of(&self.objects[dict]);
            return self.malformed(format!("set an item of a {t} (not a dict)"));
        };
        entries.extend(items.chunks(2).map(|kv| (kv[0], kv[1])));
        Ok(())
    }

    fn run(mut self) -> Result<Pickle, PickleError> {
        if self.input.len() > self.limits.max_input_bytes {
            return self.limit("max_input_bytes");
        }
        loop {
            self.op_at = self.pos;
            let op = match self.take(1) {
                Ok(b) => b[0],
                Err(_) => {
                    return Err(PickleError::Truncated {
                        offset: self.pos,
                        needed: 1,
                    });
                }
            };
            if let Some(name) = forbidden_name(op) {
                return if refused_for_safety(op) {
                    Err(PickleError::Forbidden {
                        opcode: name,
                        offset: self.op_at,
                    })
                } else {
                    self.malformed(format!(
                        "opcode {name} (a protocol-0 quoted byte string) is not supported (write the file with protocol >= 1)"
                    ))
                };
            }
            match op {
                0x80 => {
                    let p = self.u8()?;
                    if p > 5 {
                        return self.malformed(format!("protocol {p} (at most 5 is known)"));
                    }
                    self.protocol = p;
                }
                0x95 => {
                    // FRAME: a length hint; the framed bytes follow inline.
                    self.u64()?;
                }
                b'.' => {
                    let root = self.pop()?;
                    if !self.marks.is_empty() {
                        return self.malformed("STOP with a MARK still open");
                    }
                    return Ok(Pickle {
                        objects: self.objects,
                        root,
                        protocol: self.protocol,
                    });
                }
                b'(' => {
                    if self.marks.len() >= self.limits.max_marks {
                        return self.limit("max_marks");
                    }
                    self.marks.push(self.stack.len());
                }
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let t = self.top()?;
                    self.push_id(t)?;
                }
                b'N' => self.push(Object::None)?,
                0x88 => self.push(Object::Bool(true))?,
                0x89 => self.push(Object::Bool(false))?,
                b'J' => {
                    let v = self.u32()? as u32 as i32;
                    self.push(Object::Int(i128::from(v)))?;
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Object::Int(i128::from(v)))?;
                }
                b'M' => {
                    let v = self.u16()?;
                    self.push(Object::Int(i128::from(v)))?;
                }
                0x8a => {
                    let n = u64::from(self.u8()?);
                    self.long(n)?;
                }
                0x8b => {
                    let n = self.u32()? as u32 as i32;
                    if n < 0 {
                        return self.malformed("LONG4 with a negative length");
                    }
                    self.long(n as u64)?;
                }
                b'G' => {
                    let b = self.take(8)?;
                    let mut a = [0u8; 8];
                    a.copy_from_slice(b);
                    self.push(Object::Float(f64::from_be_bytes(a)))?;
                }
                b'X' => {
                    let n = self.u32()?;
                    self.string(n)?;
                }
                0x8c => {
                    let n = u64::from(self.u8()?);
                    self.string(n)?;
                }
                0x8d => {
                    let n = self.u64()?;
                    self.string(n)?;
                }
                b'T' => {
                    let n = self.u32()? as u32 as i32;
                    if n < 0 {
                        return self.malformed("BINSTRING with a negative length");
                    }
                    self.bytes(n as u64)?;
                }
                b'U' | b'C' => {
                    let n = u64::from(self.u8()?);
                    self.bytes(n)?;
                }
                b'B' => {
                    let n = self.u32()?;
                    self.bytes(n)?;
                }
                0x8e | 0x96 => {
                    let n = self.u64()?;
                    self.bytes(n)?;
                }
                b']' => self.push(Object::List(Vec::new()))?,
                b'}' => self.push(Object::Dict(Vec::new()))?,
                b')' => self.push(Object::Tuple(Vec::new()))?,
                0x8f => self.push(Object::Set(Vec::new()))?,
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    self.push(Object::Tuple(items))?;
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Object::Set(items))?;
                }
                b'a' => {
                    let x = self.pop()?;
                    let l = self.top()?;
                    self.list_mut(l)?.push(x);
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let l = self.top()?;
                    self.list_mut(l)?.extend(items);
                }
                0x90 => {
                    let items = self.pop_mark()?;
                    let s = self.top()?;
                    match &mut self.objects[s] {
                        Object::Set(v) => v.extend(items),
                        other => {
                            let t = type_of(other);
                            return self.malformed(format!("ADDITEMS to a {t} (not a set)"));
                        }
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.top()?;
                    self.set_items(d, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let d = self.top()?;
                    self.set_items(d, items)?;
                }
                b'q' => {
                    let k = u64::from(self.u8()?);
                    self.memo_put(k)?;
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memo_put(k)?;
                }
                0x94 => {
                    let k = self.memo.len() as u64;
                    self.memo_put(k)?;
                }
                b'I' => {
                    // Protocol 0/1 bools are `I00` / `I01`.
                    let line = self.input[self.pos..].split(|&b| b == b'\n').next();
                    let o = match line {
                        Some(b"00") => Some(Object::Bool(false)),
                        Some(b"01") => Some(Object::Bool(true)),
                        _ => None,
                    };
                    match o {
                        Some(o) => {
                            self.line()?;
                            self.push(o)?;
                        }
                        None => {
                            let v = self.decimal(false)?;
                            self.push(Object::Int(v))?;
                        }
                    }
                }
                b'L' => {
                    let v = self.decimal(true)?;
                    self.push(Object::Int(v))?;
                }
                b'F' => {
                    let line = self.line()?;
                    match core::str::from_utf8(line)
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                    {
                        Some(v) => self.push(Object::Float(v))?,
                        None => return self.malformed("a text float that does not parse"),
                    }
                }
                b'V' => self.raw_unicode()?,
                b'p' => {
                    let k = self.text_key()?;
                    self.memo_put(k)?;
                }
                b'g' => {
                    let k = self.text_key()?;
                    self.memo_get(k)?;
                }
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Object::List(items))?;
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Object::Tuple(items))?;
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    self.push(Object::Dict(Vec::new()))?;
                    let d = self.top()?;
                    self.set_items(d, items)?;
                }
                b'h' => {
                    let k = u64::from(self.u8()?);
                    self.memo_get(k)?;
                }
                b'j' => {
                    let k = self.u32()?;
                    self.memo_get(k)?;
                }
                _ => {
                    return Err(PickleError::UnknownOpcode {
                        byte: op,
                        offset: self.op_at,
                    });
                }
            }
        }
    }
}

fn type_of(o: &Object) -> &'static str {
    match o {
        Object::None => "None",
        Object::Bool(_) => "bool",
        Object::Int(_) => "int",
        Object::Float(_) => "float",
        Object::Str(_) => "str",
        Object::Bytes(_) => "bytes",
        Object::List(_) => "list",
        Object::Tuple(_) => "tuple",
        Object::Dict(_) => "dict",
        Object::Set(_) => "set",
    }
}
