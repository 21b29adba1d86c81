//! The restricted unpickler: every supported opcode from hand-built bytes, and hostile input.

use alloclab_training::pickle::{Limits, Object, Pickle, PickleError};

fn parse(bytes: &[u8]) -> Result<Pickle, PickleError> {
    Pickle::parse(bytes, &Limits::default())
}

fn root(bytes: &[u8]) -> Object {
    let p = parse(bytes).unwrap_or_else(|e| panic!("{e}"));
    p.root().object().clone()
}

/// The ints of a list or tuple root.
fn ints(bytes: &[u8]) -> Vec<i64> {
    let p = parse(bytes).unwrap_or_else(|e| panic!("{e}"));
    p.root()
        .as_list()
        .expect("a list")
        .iter()
        .map(|v| v.as_i64().expect("an int"))
        .collect()
}

#[test]
fn scalars() {
    assert_eq!(root(b"N."), Object::None);
    assert_eq!(root(b"\x80\x02\x88."), Object::Bool(true));
    assert_eq!(root(b"\x80\x02\x89."), Object::Bool(false));
    assert_eq!(root(b"K\xff."), Object::Int(255)); // BININT1
    assert_eq!(root(b"M\x34\x12."), Object::Int(0x1234)); // BININT2
    assert_eq!(root(b"J\xfe\xff\xff\xff."), Object::Int(-2)); // BININT
    // LONG1: 2**40 and -1 (pickle.dumps(2**40, 2), pickle.dumps(-2**63, 2)).
    assert_eq!(
        root(b"\x80\x02\x8a\x06\x00\x00\x00\x00\x00\x01."),
        Object::Int(1 << 40)
    );
    assert_eq!(root(b"\x80\x02\x8a\x01\xff."), Object::Int(-1));
    assert_eq!(
        root(b"\x80\x02\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80."),
        Object::Int(-(1i128 << 63))
    );
    // 2**64 needs 9 bytes; u64::MAX needs 9 (a zero sign byte).
    assert_eq!(
        root(b"\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00."),
        Object::Int(i128::from(u64::MAX))
    );
    assert_eq!(root(b"\x80\x02\x8a\x00."), Object::Int(0));
    // LONG4 of 2 bytes: 0x0100.
    assert_eq!(
        root(b"\x80\x02\x8b\x02\x00\x00\x00\x00\x01."),
        Object::Int(256)
    );
    // BINFLOAT, big endian: 1.5.
    assert_eq!(root(b"G?\xf8\x00\x00\x00\x00\x00\x00."), Object::Float(1.5));
}

#[test]
fn strings_and_bytes() {
    let s = |b: &[u8]| match root(b) {
        Object::Str(s) => s,
        o => panic!("{o:?}"),
    };
    let by = |b: &[u8]| match root(b) {
        Object::Bytes(s) => s,
        o => panic!("{o:?}"),
    };
    assert_eq!(s(b"X\x03\x00\x00\x00abc."), "abc"); // BINUNICODE
    assert_eq!(s(b"\x80\x04\x8c\x02\xc3\xa9."), "é"); // SHORT_BINUNICODE
    assert_eq!(s(b"\x80\x04\x8d\x01\x00\x00\x00\x00\x00\x00\x00z."), "z"); // BINUNICODE8
    assert_eq!(by(b"\x80\x03C\x02hi."), b"hi"); // SHORT_BINBYTES
    assert_eq!(by(b"\x80\x03B\x01\x00\x00\x00x."), b"x"); // BINBYTES
    assert_eq!(by(b"\x80\x04\x8e\x01\x00\x00\x00\x00\x00\x00\x00y."), b"y"); // BINBYTES8
    assert_eq!(by(b"\x80\x05\x96\x01\x00\x00\x00\x00\x00\x00\x00w."), b"w"); // BYTEARRAY8
    assert_eq!(by(b"U\x02ok."), b"ok"); // SHORT_BINSTRING
    assert_eq!(by(b"T\x02\x00\x00\x00ok."), b"ok"); // BINSTRING
}

#[test]
fn containers() {
    assert_eq!(root(b"]."), Object::List(vec![]));
    assert_eq!(root(b")."), Object::Tuple(vec![]));
    assert_eq!(root(b"}."), Object::Dict(vec![]));
    assert_eq!(root(b"\x80\x04\x8f."), Object::Set(vec![]));
    assert_eq!(ints(b"]K\x01a."), [1]); // APPEND
    assert_eq!(ints(b"](K\x01K\x02K\x03e."), [1, 2, 3]); // MARK, APPENDS
    assert_eq!(ints(b"\x80\x02K\x01\x85."), [1]); // TUPLE1
    assert_eq!(ints(b"\x80\x02K\x01K\x02\x86."), [1, 2]); // TUPLE2
    assert_eq!(ints(b"\x80\x02K\x01K\x02K\x03\x87."), [1, 2, 3]); // TUPLE3
    // SETITEM and SETITEMS.
    let p =
        parse(b"}X\x01\x00\x00\x00aK\x01s(X\x01\x00\x00\x00bK\x02X\x01\x00\x00\x00cNu.").unwrap();
    let d = p.root();
    assert_eq!(d.get("a").unwrap().as_i64(), Some(1));
    assert_eq!(d.get("b").unwrap().as_i64(), Some(2));
    assert!(d.get("c").unwrap().is_none());
    assert!(d.get("zz").is_none());
    assert_eq!(d.as_dict().unwrap().len(), 3);
    // A repeated key: the last value wins, as in Python.
    let p = parse(b"}(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00aK\x02u.").unwrap();
    assert_eq!(p.root().get("a").unwrap().as_i64(), Some(2));
    // EMPTY_SET + ADDITEMS; FROZENSET.
    match root(b"\x80\x04\x8f(K\x01K\x02\x90.") {
        Object::Set(v) => assert_eq!(v.len(), 2),
        o => panic!("{o:?}"),
    }
    match root(b"\x80\x04(K\x01\x91.") {
        Object::Set(v) => assert_eq!(v.len(), 1),
        o => panic!("{o:?}"),
    }
}

#[test]
fn stack_and_memo() {
    // PROTO, FRAME, MEMOIZE, BINGET: [x, x] sharing one list.
    let p = parse(b"\x80\x04\x95\x0c\x00\x00\x00\x00\x00\x00\x00]\x94(]\x94h\x01e.").unwrap();
    assert_eq!(p.protocol(), 4);
    let l = p.root().as_list().unwrap();
    assert_eq!(l.len(), 2);
    assert_eq!(l[0].id(), l[1].id(), "memo GETs share, not copy");
    // BINPUT / LONG_BINPUT / LONG_BINGET.
    assert_eq!(
        ints(b"](K\x07q\x05r\x06\x00\x00\x00h\x05j\x06\x00\x00\x00e."),
        [7, 7, 7]
    );
    // POP, DUP, POP_MARK.
    assert_eq!(ints(b"](K\x01K\x090K\x022e."), [1, 2, 2]);
    assert_eq!(ints(b"](K\x01(K\x08K\x091e."), [1]);
    // A list that contains itself is harmless.
    let p = parse(b"]q\x00h\x00a.").unwrap();
    let l = p.root().as_list().unwrap();
    assert_eq!(l[0].id(), p.root().id());
}

#[test]
fn python_output_of_protocols_2_to_5() {
    // pickle.dumps({"action": "alloc", "addr": 2**40, "size": 512, "frames": [], "t": 0.5,
    //               "ok": True}, protocol=p) for p = 2 and 4, from CPython 3.11.
    let p2 = b"\x80\x02}q\x00(X\x06\x00\x00\x00actionq\x01X\x05\x00\x00\x00allocq\x02X\x04\x00\x00\x00addrq\x03\x8a\x06\x00\x00\x00\x00\x00\x01X\x04\x00\x00\x00sizeq\x04M\x00\x02X\x06\x00\x00\x00framesq\x05]q\x06X\x01\x00\x00\x00tq\x07G?\xe0\x00\x00\x00\x00\x00\x00X\x02\x00\x00\x00okq\x08\x88u.";
    let p4 = b"\x80\x04\x95K\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94\x8a\x06\x00\x00\x00\x00\x00\x01\x8c\x04size\x94M\x00\x02\x8c\x06frames\x94]\x94\x8c\x01t\x94G?\xe0\x00\x00\x00\x00\x00\x00\x8c\x02ok\x94\x88u.";
    for bytes in [&p2[..], &p4[..]] {
        let p = parse(bytes).unwrap_or_else(|e| panic!("{e}"));
        let d = p.root();
        assert_eq!(d.get("action").unwrap().as_str(), Some("alloc"));
        assert_eq!(d.get("addr").unwrap().as_u64(), Some(1 << 40));
        assert_eq!(d.get("size").unwrap().as_u64(), Some(512));
        assert_eq!(d.get("frames").unwrap().as_list().unwrap().len(), 0);
        assert_eq!(d.get("t").unwrap().as_f64(), Some(0.5));
        assert_eq!(d.get("ok").unwrap().as_bool(), Some(true));
    }
}

#[test]
fn protocols_0_and_1() {
    // obj = {"a": [1, -2, 2**40, True, False, None, 1.5], "s": "é\\\n€😀", "t": (1, 2)}
    // pickle.dumps(obj, protocol=0) and protocol=1, from CPython 3.11: INT, LONG, FLOAT,
    // UNICODE, PUT, GET-free DICT/LIST/TUPLE at protocol 0; I00/I01 bools and text LONG at 1.
    let p0 = b"(dp0\nVa\np1\n(lp2\nI1\naI-2\naL1099511627776L\naI01\naI00\naNaF1.5\nasVs\np3\nV\xe9\\u005c\\u000a\\u20ac\\U0001f600\np4\nsVt\np5\n(I1\nI2\ntp6\ns.";
    let p1 = b"}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01J\xfe\xff\xff\xffL1099511627776L\nI01\nI00\nNG?\xf8\x00\x00\x00\x00\x00\x00eX\x01\x00\x00\x00sq\x03X\x0b\x00\x00\x00\xc3\xa9\\\n\xe2\x82\xac\xf0\x9f\x98\x80q\x04X\x01\x00\x00\x00tq\x05(K\x01K\x02tq\x06u.";
    for bytes in [&p0[..], &p1[..]] {
        let p = parse(bytes).unwrap_or_else(|e| panic!("{e}"));
        let d = p.root();
        let a = d.get("a").unwrap().as_list().unwrap();
        assert_eq!(a[0].as_i64(), Some(1));
        assert_eq!(a[1].as_i64(), Some(-2));
        assert_eq!(a[2].as_u64(), Some(1 << 40));
        assert_eq!(a[3].as_bool(), Some(true));
        assert_eq!(a[4].as_bool(), Some(false));
        assert!(a[5].is_none());
        assert_eq!(a[6].as_f64(), Some(1.5));
        assert_eq!(d.get("s").unwrap().as_str(), Some("é\\\n€😀"));
        let t = d.get("t").unwrap();
        assert_eq!(t.type_name(), "tuple");
        assert_eq!(t.as_list().unwrap().len(), 2);
    }
    // Text PUT / GET.
    assert_eq!(ints(b"(I5\np3\ng3\nl."), [5, 5]);
}

fn forbidden(bytes: &[u8]) -> (&'static str, usize) {
    match parse(bytes) {
        Err(PickleError::Forbidden { opcode, offset }) => (opcode, offset),
        other => panic!("expected Forbidden, got {other:?}"),
    }
}

#[test]
fn code_opcodes_are_refused() {
    // pickle.dumps of a class whose __reduce__ returns (os.system, ("echo pwned",)), protocol 0.
    let global = b"cposix\nsystem\np0\n(Vecho pwned\np1\ntp2\nRp3\n.";
    assert_eq!(forbidden(global), ("GLOBAL", 0));
    // The same at protocol 4: STACK_GLOBAL after two strings.
    let stack_global =
        b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94.";
    assert_eq!(forbidden(stack_global), ("STACK_GLOBAL", 28));
    // REDUCE with no GLOBAL before it (a callable from the memo, say) is refused on its own.
    assert_eq!(forbidden(b"\x80\x02N)R."), ("REDUCE", 4));
    assert_eq!(forbidden(b"\x80\x02}}b."), ("BUILD", 4));
    assert_eq!(forbidden(b"(ios\nsystem\n."), ("INST", 1));
    assert_eq!(forbidden(b"(No."), ("OBJ", 2));
    assert_eq!(forbidden(b"\x80\x02N)\x81."), ("NEWOBJ", 4));
    assert_eq!(forbidden(b"\x80\x04N)}\x92."), ("NEWOBJ_EX", 5));
    assert_eq!(forbidden(b"P1\n."), ("PERSID", 0));
    assert_eq!(forbidden(b"NQ."), ("BINPERSID", 1));
    assert_eq!(forbidden(b"\x80\x02\x82\x01."), ("EXT1", 2));
    assert_eq!(forbidden(b"\x80\x02\x83\x01\x00."), ("EXT2", 2));
    assert_eq!(forbidden(b"\x80\x02\x84\x01\x00\x00\x00."), ("EXT4", 2));
    assert_eq!(forbidden(b"\x80\x05\x97."), ("NEXT_BUFFER", 2));
    assert_eq!(forbidden(b"\x80\x05\x98."), ("READONLY_BUFFER", 2));
    let msg = parse(global).unwrap_err().to_string();
    assert!(msg.contains("GLOBAL") && msg.contains("offset 0"), "{msg}");
}

#[test]
fn hostile_and_broken_input_is_an_error() {
    let err = |b: &[u8]| parse(b).expect_err("must be refused");
    // Truncated: no STOP, inside a length, inside a payload.
    assert!(matches!(err(b"\x80\x02]"), PickleError::Truncated { .. }));
    assert!(matches!(err(b""), PickleError::Truncated { .. }));
    assert!(matches!(err(b"X\x05\x00"), PickleError::Truncated { .. }));
    assert!(matches!(
        err(b"X\x05\x00\x00\x00ab"),
        PickleError::Truncated {
            offset: 0,
            needed: 3
        }
    ));
    // Huge length prefixes: refused before allocating.
    assert!(matches!(
        err(b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\x7fabc."),
        PickleError::Truncated { offset: 2, .. }
    ));
    assert!(matches!(
        err(b"\x80\x04\x8e\xff\xff\xff\xff\xff\xff\xff\xff."),
        PickleError::Truncated { .. }
    ));
    assert!(matches!(
        err(b"\x80\x02\x8b\xff\xff\xff\x7f."),
        PickleError::Truncated { .. }
    ));
    assert!(matches!(
        err(b"\x80\x02\x8b\xff\xff\xff\xff."),
        PickleError::Malformed { .. }
    ));
    // An int longer than 16 bytes.
    let mut long = b"\x80\x02\x8a\x11".to_vec();
    long.extend([1u8; 17]);
    long.push(b'.');
    assert!(matches!(err(&long), PickleError::Malformed { .. }));
    // Deep nesting: 100k open MARKs, and 2M nested empty lists on the stack.
    let deep = vec![b'('; 100_000];
    assert!(matches!(
        err(&deep),
        PickleError::LimitExceeded {
            limit: "max_marks",
            ..
        }
    ));
    let lists = vec![b']'; 2 << 20];
    assert!(matches!(
        err(&lists),
        PickleError::LimitExceeded {
            limit: "max_stack",
            ..
        }
    ));
    // Memo index out of range, and memo at an empty stack.
    assert!(matches!(err(b"h\x05."), PickleError::Malformed { .. }));
    assert!(matches!(
        err(b"j\xff\xff\xff\xff."),
        PickleError::Malformed { .. }
    ));
    assert!(matches!(err(b"q\x00."), PickleError::Malformed { .. }));
    // Stack misuse: STOP on empty, pop across a MARK, APPEND to a dict, SETITEM on a list,
    // odd SETITEMS, an unhashable key, STOP with an open mark, a protocol from the future.
    for bad in [
        &b"."[..],
        b"(0.",
        b"}K\x01a.",
        b"]K\x01K\x02s.",
        b"}(K\x01u.",
        b"}]K\x01s.",
        b"N(.",
        b"\x80\x06N.",
        b"1.",
        b"X\x01\x00\x00\x00\xff.",
        b"\x80\x04K\x01\x90.",
    ] {
        assert!(matches!(err(bad), PickleError::Malformed { .. }), "{bad:?}");
    }
    // Unknown opcodes and the unsupported protocol-0 text forms.
    assert!(matches!(
        err(b"\xff."),
        PickleError::UnknownOpcode {
            byte: 0xff,
            offset: 0
        }
    ));
    assert!(matches!(err(b"Ix\n."), PickleError::Malformed { .. }));
    assert!(matches!(err(b"I1"), PickleError::Truncated { .. }));
    assert!(matches!(err(b"F1.5.5\n."), PickleError::Malformed { .. }));
    assert!(matches!(err(b"g-1\n."), PickleError::Malformed { .. }));
    assert!(matches!(err(b"V\\u12\n."), PickleError::Malformed { .. }));
    assert!(matches!(
        err(b"V\\Uffffffff\n."),
        PickleError::Malformed { .. }
    ));
    assert!(matches!(err(b"S'a'\n."), PickleError::Malformed { .. }));
    // Object and input limits.
    let tight = Limits {
        max_objects: 3,
        ..Limits::default()
    };
    assert!(matches!(
        Pickle::parse(b"](K\x01K\x02K\x03e.", &tight),
        Err(PickleError::LimitExceeded {
            limit: "max_objects",
            ..
        })
    ));
    let small = Limits {
        max_input_bytes: 2,
        ..Limits::default()
    };
    assert!(matches!(
        Pickle::parse(b"]K\x01a.", &small),
        Err(PickleError::LimitExceeded {
            limit: "max_input_bytes",
            ..
        })
    ));
    let memo = Limits {
        max_memo: 1,
        ..Limits::default()
    };
    assert!(matches!(
        Pickle::parse(b"]\x94]\x94.", &memo),
        Err(PickleError::LimitExceeded {
            limit: "max_memo",
            ..
        })
    ));
}

#[test]
fn billion_laughs_stays_linear() {
    // Each level is a list holding the previous level twice (through the memo): 2**40
    // leaves if copied, 40 small lists in the arena.
    let mut b = b"\x80\x04]\x94".to_vec(); // memo 0: []
    for i in 0..40u32 {
        b.extend(b"](j");
        b.extend(i.to_le_bytes());
        b.extend(b"j");
        b.extend(i.to_le_bytes());
        b.extend(b"e\x94");
    }
    b.push(b'.');
    let p = parse(&b).unwrap();
    assert_eq!(p.objects().len(), 41);
}
