//! C stubs from an interface's description: [`generate`] turns the JSON
//! that `describe()` emits into a header and a source file over ferry's C
//! API (`crates/ferry-ffi/include/ferry.h`), with a typed client function
//! per operation and a server dispatch table. The `ferry-idl-c` program
//! runs it (`ferry-idl-c DESCRIPTION.json OUT_DIR [PREFIX]`). Both files are
//! C11 and C++17 alike (declarations inside `extern "C"`, every pointer
//! from `malloc` cast to its type), so C++ programs compile them too.
//!
//! The generated code speaks the wire encoding of [`ferry::idl::codec`] byte for
//! byte and makes the same checks before a server's function runs (validate,
//! then act): a value cut short or with bytes left over, a bad `bool` or
//! option tag, an unknown enumeration tag, a count larger than the bytes
//! left, a missing or repeated field, an item that does not exist, is
//! claimed twice, is of another kind or travels in another mode, an item no
//! value claims, records nested deeper than [`ferry::idl::codec::MAX_DEPTH`]. A
//! request that fails any of them is answered with a `BadRequest` fault.
//!
//! C types: the scalars are `<stdint.h>` types and `bool`; strings and byte
//! lists are `ferry_idl_bytes` (decoded ones are `malloc`ed, strings
//! NUL-terminated too); an optional value is a struct with `present`; a list
//! a struct with `items` and `len`; a record a struct of its fields; an
//! enumeration a struct with a `tag` (the variant's ordinal, named by
//! `PREFIX_ENUM_VARIANT` constants) and a union of payloads; rights are the
//! C API's handles (consumed when sent, owned when received); a region is
//! `ferry_idl_region`: `out`, a `ferry_region` sent by copy (stays the
//! caller's), or `in`, the received region mapped read-only.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// Why a description could not be turned into C.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CError(pub String);

impl std::fmt::Display for CError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot generate C: {}", self.0)
    }
}

impl std::error::Error for CError {}

fn bad(what: impl Into<String>) -> CError {
    CError(what.into())
}

/// The generated files.
#[derive(Debug, Clone)]
pub struct CStubs {
    /// The header's file name (`PREFIX.h`).
    pub header_name: String,
    /// The header.
    pub header: String,
    /// The source file's name (`PREFIX.c`).
    pub source_name: String,
    /// The source.
    pub source: String,
}

/// `s` as the inside of a C string literal holding its UTF-8 bytes:
/// printable ASCII as it is, but for `"`, `\` and `?` (trigraphs), which
/// are escaped, and every other byte as a three-digit octal escape (which
/// no following digit can extend). The result has no `*/` or `/*`, so it
/// may go inside a comment too.
fn c_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'"' | b'\\' | b'?' => {
                out.push('\\');
                out.push(char::from(b));
            }
            // `*/` would end a comment the name is quoted in, and `/*`
            // in one is warned about.
            b'/' if out.ends_with('*') => out.push_str("\\057"),
            b'*' if out.ends_with('/') => out.push_str("\\052"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
    out
}

/// `CamelCase` or `dotted.name` to `snake_case`.
fn snake(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out
}

/// Words a name from the description cannot be used as in C or C++ (the
/// header is meant for both): keywords, and the macros the standard
/// headers and GNU C define for themselves.
const RESERVED: &[&str] = &[
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern", "float",
    "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed", "sizeof", "static",
    "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "alignas", "alignof", "bool",
    "constexpr", "false", "nullptr", "static_assert", "thread_local", "true", "typeof", "typeof_unqual", "asm",
    "catch", "class", "const_cast", "delete", "dynamic_cast", "explicit", "export", "friend", "mutable", "namespace",
    "new", "noexcept", "operator", "private", "protected", "public", "reinterpret_cast", "static_cast", "template",
    "this", "throw", "try", "typeid", "typename", "using", "virtual", "wchar_t", "and", "or", "not", "xor", "errno",
    "assert", "offsetof", "stdin", "stdout", "stderr", "unix", "linux", "i386", "NULL", "EOF",
];

/// Headers the stubs' own `PREFIX.h` must not be named like: ferry's C API
/// and the C library's standard headers (the stubs include some of them,
/// and a build that puts the stubs' directory on its include path finds
/// the stubs' header in their place).
const HEADERS: &[&str] = &[
    "ferry", "assert", "complex", "ctype", "errno", "fenv", "float", "inttypes", "iso646", "limits", "locale", "math",
    "setjmp", "signal", "stdalign", "stdarg", "stdatomic", "stdbool", "stddef", "stdint", "stdio", "stdlib",
    "stdnoreturn", "string", "tgmath", "threads", "time", "uchar", "wchar", "wctype",
];

/// A name from the description as a C struct member or parameter: itself,
/// or with a trailing `_` where it is a reserved word (`register_`).
fn member(name: &str) -> String {
    if RESERVED.contains(&name) {
        format!("{name}_")
    } else {
        name.to_owned()
    }
}

/// A member name as a parameter of a prototype beside the generated ones
/// (`c`, `ctx`, `result`, `error`): itself, or with a trailing `_` where it
/// is one of them.
fn param(member: &str) -> String {
    if ["c", "ctx", "result", "error"].contains(&member) {
        format!("{member}_")
    } else {
        member.to_owned()
    }
}

fn ident_ok(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !s.starts_with(|c: char| c.is_ascii_digit())
}

const SCALARS: [(&str, &str, usize); 10] = [
    ("u8", "uint8_t", 1),
    ("u16", "uint16_t", 2),
    ("u32", "uint32_t", 4),
    ("u64", "uint64_t", 8),
    ("i8", "int8_t", 1),
    ("i16", "int16_t", 2),
    ("i32", "int32_t", 4),
    ("i64", "int64_t", 8),
    ("f32", "float", 4),
    ("f64", "double", 8),
];

/// One type of the description, as the generator knows it.
struct Ty {
    /// The C type.
    c: String,
    /// The name part of its functions (`enc_NAME`, `dec_NAME`, `free_NAME`).
    m: String,
    /// Smallest encoded size.
    min: usize,
    /// Whether it is `{"optional": …}` (absent fields become not present).
    optional: bool,
}

struct Gen {
    p: String,
    /// Type declarations, in dependency order.
    decls: String,
    /// Constants for the header.
    consts: String,
    /// Function bodies (static).
    funcs: String,
    /// Prototypes of the static functions.
    protos: String,
    /// Every stem the stubs make names from (`PREFIX_STEM`, `enc_STEM`,
    /// `PREFIX_free_STEM`...; `#` and the upper-case rest for a constant),
    /// and what it names: its description and definition. Two things the
    /// description keeps apart that C would name alike are refused, rather
    /// than one silently taking the other's code.
    names: BTreeMap<String, (String, Value)>,
}

impl Gen {
    /// Registers type `t` (and what it uses) and returns how to name it.
    fn ty(&mut self, t: &Value) -> Result<Ty, CError> {
        if let Some(s) = t.as_str() {
            if let Some((_, c, n)) = SCALARS.iter().find(|(name, ..)| *name == s) {
                self.scalar(s, c)?;
                return Ok(Ty { c: (*c).into(), m: s.into(), min: *n, optional: false });
            }
            return match s {
                "bool" => {
                    self.once("bool", t, |g| {
                        g.proto("static void enc_bool(fidl_enc *e, const bool *v)");
                        g.funcs.push_str("static void enc_bool(fidl_enc *e, const bool *v) { uint8_t b = *v ? 1 : 0; fidl_put(e, &b, 1); }\n");
                        g.proto("static int dec_bool(fidl_dec *d, bool *v)");
                        g.funcs.push_str("static int dec_bool(fidl_dec *d, bool *v) {\n    const uint8_t *b;\n    if (fidl_take(d, 1, &b)) return -1;\n    if (*b > 1) return fidl_fail(d, \"a bool is neither 0 nor 1\");\n    *v = *b == 1;\n    return 0;\n}\n");
                        g.funcs.push_str("static void free_bool(bool *v) { (void)v; }\n");
                        g.proto("static void free_bool(bool *v)");
                    })?;
                    Ok(Ty { c: "bool".into(), m: "bool".into(), min: 1, optional: false })
                }
                "string" | "bytes" => {
                    let utf8 = s == "string";
                    let m = if utf8 { "str" } else { "bytes" };
                    self.once(m, t, |g| {
                        g.proto(&format!("static void enc_{m}(fidl_enc *e, const ferry_idl_bytes *v)"));
                        let _ = writeln!(g.funcs, "static void enc_{m}(fidl_enc *e, const ferry_idl_bytes *v) {{ fidl_put_u32(e, (uint32_t)v->len); fidl_put(e, v->data, v->len); }}");
                        g.proto(&format!("static int dec_{m}(fidl_dec *d, ferry_idl_bytes *v)"));
                        let _ = writeln!(
                            g.funcs,
                            "static int dec_{m}(fidl_dec *d, ferry_idl_bytes *v) {{\n    uint32_t n;\n    const uint8_t *b;\n    if (fidl_count(d, 1, &n) || fidl_take(d, n, &b)) return -1;\n{}    v->data = (uint8_t *)malloc((size_t)n + 1);\n    if (v->data == NULL) return fidl_fail(d, \"out of memory\");\n    memcpy(v->data, b, n);\n    v->data[n] = 0;\n    v->len = n;\n    return 0;\n}}",
                            if utf8 { "    if (!fidl_utf8(b, n)) return fidl_fail(d, \"a string is not UTF-8\");\n" } else { "" }
                        );
                        g.proto(&format!("static void free_{m}(ferry_idl_bytes *v)"));
                        let _ = writeln!(g.funcs, "static void free_{m}(ferry_idl_bytes *v) {{ free(v->data); v->data = NULL; v->len = 0; }}");
                    })?;
                    Ok(Ty { c: "ferry_idl_bytes".into(), m: m.into(), min: 4, optional: false })
                }
                "unit" => Err(bad("unit appears only as a result")),
                other => Err(bad(format!("unknown type {other:?}"))),
            };
        }
        let o = t.as_object().ok_or_else(|| bad(format!("a type is neither a name nor an object: {t}")))?;
        if let Some(inner) = o.get("optional") {
            let i = self.ty(inner)?;
            let m = format!("opt_{}", i.m);
            let c = format!("{}_{m}", self.p);
            self.once(&m.clone(), t, |g| {
                let _ = writeln!(g.decls, "/** An optional `{}`: `value` means something only if `present`. */\ntypedef struct {c} {{\n    bool present;\n    {} value;\n}} {c};\n", i.c, i.c);
                g.proto(&format!("static void enc_{m}(fidl_enc *e, const {c} *v)"));
                let _ = writeln!(g.funcs, "static void enc_{m}(fidl_enc *e, const {c} *v) {{\n    uint8_t tag = v->present ? 1 : 0;\n    fidl_put(e, &tag, 1);\n    if (v->present) enc_{}(e, &v->value);\n}}", i.m);
                g.proto(&format!("static int dec_{m}(fidl_dec *d, {c} *v)"));
                let _ = writeln!(g.funcs, "static int dec_{m}(fidl_dec *d, {c} *v) {{\n    const uint8_t *t;\n    if (fidl_take(d, 1, &t)) return -1;\n    if (*t > 1) return fidl_fail(d, \"an optional value's tag is neither 0 nor 1\");\n    v->present = *t == 1;\n    return v->present ? dec_{}(d, &v->value) : 0;\n}}", i.m);
                g.proto(&format!("static void free_{m}({c} *v)"));
                let _ = writeln!(g.funcs, "static void free_{m}({c} *v) {{\n    if (v->present) free_{}(&v->value);\n    v->present = false;\n}}", i.m);
            })?;
            return Ok(Ty { c, m, min: 1, optional: true });
        }
        if let Some(inner) = o.get("list") {
            let i = self.ty(inner)?;
            let m = format!("list_{}", i.m);
            let c = format!("{}_{m}", self.p);
            self.once(&m.clone(), t, |g| {
                let _ = writeln!(g.decls, "/** A list of `{}`. */\ntypedef struct {c} {{\n    {} *items;\n    size_t len;\n}} {c};\n", i.c, i.c);
                g.proto(&format!("static void enc_{m}(fidl_enc *e, const {c} *v)"));
                let _ = writeln!(g.funcs, "static void enc_{m}(fidl_enc *e, const {c} *v) {{\n    fidl_put_u32(e, (uint32_t)v->len);\n    for (size_t i = 0; i < v->len; i++) enc_{}(e, &v->items[i]);\n}}", i.m);
                g.proto(&format!("static int dec_{m}(fidl_dec *d, {c} *v)"));
                let _ = writeln!(g.funcs, "static int dec_{m}(fidl_dec *d, {c} *v) {{\n    uint32_t n;\n    v->items = NULL;\n    v->len = 0;\n    if (fidl_count(d, {}, &n)) return -1;\n    if (n == 0) return 0;\n    v->items = ({} *)calloc(n, sizeof *v->items);\n    if (v->items == NULL) return fidl_fail(d, \"out of memory\");\n    for (; v->len < n; v->len++)\n        if (dec_{}(d, &v->items[v->len])) {{\n            /* Not counted in len: what it decoded before failing is freed here. */\n            free_{}(&v->items[v->len]);\n            return -1;\n        }}\n    return 0;\n}}", i.min, i.c, i.m, i.m);
                g.proto(&format!("static void free_{m}({c} *v)"));
                let _ = writeln!(g.funcs, "static void free_{m}({c} *v) {{\n    for (size_t i = 0; i < v->len; i++) free_{}(&v->items[i]);\n    free(v->items);\n    v->items = NULL;\n    v->len = 0;\n}}", i.m);
            })?;
            return Ok(Ty { c, m, min: 4, optional: false });
        }
        if let Some(n) = o.get("array") {
            if n != "u8" {
                return Err(bad("only arrays of u8 are supported"));
            }
            let len = o.get("len").and_then(Value::as_u64).ok_or_else(|| bad("an array without len"))? as usize;
            let m = format!("arr{len}");
            let c = format!("{}_{m}", self.p);
            self.once(&m.clone(), t, |g| {
                let _ = writeln!(g.decls, "/** {len} bytes. */\ntypedef struct {c} {{\n    uint8_t bytes[{len}];\n}} {c};\n");
                g.proto(&format!("static void enc_{m}(fidl_enc *e, const {c} *v)"));
                let _ = writeln!(g.funcs, "static void enc_{m}(fidl_enc *e, const {c} *v) {{ fidl_put(e, v->bytes, {len}); }}");
                g.proto(&format!("static int dec_{m}(fidl_dec *d, {c} *v)"));
                let _ = writeln!(g.funcs, "static int dec_{m}(fidl_dec *d, {c} *v) {{\n    const uint8_t *b;\n    if (fidl_take(d, {len}, &b)) return -1;\n    memcpy(v->bytes, b, {len});\n    return 0;\n}}");
                g.proto(&format!("static void free_{m}({c} *v)"));
                let _ = writeln!(g.funcs, "static void free_{m}({c} *v) {{ (void)v; }}");
            })?;
            return Ok(Ty { c, m, min: len, optional: false });
        }
        if let Some(name) = o.get("record").and_then(Value::as_str) {
            if !ident_ok(name) {
                return Err(bad(format!("record name {name:?} is not a C identifier")));
            }
            let m = snake(name);
            let c = format!("{}_{m}", self.p);
            let fields = o.get("fields").and_then(Value::as_array).ok_or_else(|| bad(format!("record {name} without fields")))?.clone();
            let what = format!("record {name}");
            if self.claim_type(&m, &what, t)? {
                self.claim(&format!("{m}_fields"), &what, t)?;
                let body = self.fields_code(&fields, &format!("record {name}"), "v->")?;
                let mut decl = format!("/** Record `{name}`. */\ntypedef struct {c} {{\n");
                for (f, t) in &body.types {
                    let _ = writeln!(decl, "    {} {};", t.c, f);
                }
                if body.types.is_empty() {
                    decl.push_str("    char unused;\n");
                }
                let _ = writeln!(decl, "}} {c};\n");
                self.decls.push_str(&decl);
                self.proto(&format!("static void enc_{m}(fidl_enc *e, const {c} *v)"));
                let _ = writeln!(self.funcs, "static void enc_{m}(fidl_enc *e, const {c} *v) {{\n    size_t at = fidl_begin(e);\n{}    fidl_end(e, at);\n}}", body.enc);
                self.proto(&format!("static int dec_{m}(fidl_dec *d, {c} *v)"));
                let _ = writeln!(
                    self.funcs,
                    "static int dec_{m}(fidl_dec *d, {c} *v) {{\n    uint32_t len;\n    memset(v, 0, sizeof *v);\n    if (fidl_u32(d, &len)) return -1;\n    if (d->depth >= FIDL_MAX_DEPTH) return fidl_fail(d, \"records nested too deeply\");\n    if (len > d->end - d->pos) return fidl_fail(d, \"a record is cut short\");\n    size_t outer = d->end;\n    d->end = d->pos + len;\n    d->depth++;\n    int r = dec_{m}_fields(d, v);\n    d->depth--;\n    if (r) return -1;\n    d->end = outer;\n    return 0;\n}}"
                );
                self.proto(&format!("static int dec_{m}_fields(fidl_dec *d, {c} *v)"));
                let _ = writeln!(self.funcs, "static int dec_{m}_fields(fidl_dec *d, {c} *v) {{\n{}}}", body.dec);
                self.proto(&format!("static void free_{m}({c} *v)"));
                let _ = writeln!(self.funcs, "static void free_{m}({c} *v) {{\n{}    (void)v;\n}}", body.free);
            }
            return Ok(Ty { c, m, min: 4, optional: false });
        }
        if let Some(name) = o.get("enum").and_then(Value::as_str) {
            if !ident_ok(name) {
                return Err(bad(format!("enumeration name {name:?} is not a C identifier")));
            }
            let m = snake(name);
            let c = format!("{}_{m}", self.p);
            let variants = o.get("variants").and_then(Value::as_array).ok_or_else(|| bad(format!("enum {name} without variants")))?.clone();
            if self.claim_type(&m, &format!("enum {name}"), t)? {
                let (mut union, mut enc, mut dec, mut free) = (String::new(), String::new(), String::new(), String::new());
                let mut ords = Vec::new();
                for v in &variants {
                    let vname = v.get("name").and_then(Value::as_str).ok_or_else(|| bad("a variant without a name"))?;
                    if !ident_ok(vname) {
                        return Err(bad(format!("enum {name}: variant name {vname:?} is not a C identifier")));
                    }
                    let ord = v.get("ordinal").and_then(Value::as_u64).ok_or_else(|| bad("a variant without an ordinal"))?;
                    // The tag is a u32, and each ordinal is one case.
                    if ord > u64::from(u32::MAX) || ords.contains(&ord) {
                        return Err(bad(format!("enum {name}: variant {vname}'s ordinal {ord} is over {} or used twice", u32::MAX)));
                    }
                    ords.push(ord);
                    let konst = format!("{}_{}_{}", self.p, m, snake(vname)).to_ascii_uppercase();
                    self.claim(&format!("#{}_{}", m, snake(vname)).to_ascii_uppercase(), &format!("variant {name}::{vname}"), v)?;
                    let _ = writeln!(self.consts, "/** `{name}::{vname}`. */\n#define {konst} {ord}u");
                    let field = member(&snake(vname));
                    match v.get("payload") {
                        Some(p) if !p.is_null() => {
                            let t = self.ty(p)?;
                            let _ = writeln!(union, "        {} {field};", t.c);
                            let _ = writeln!(enc, "    case {ord}u: enc_{}(e, &v->u.{field}); break;", t.m);
                            let _ = writeln!(dec, "    case {ord}u: return dec_{}(d, &v->u.{field});", t.m);
                            let _ = writeln!(free, "    case {ord}u: free_{}(&v->u.{field}); break;", t.m);
                        }
                        _ => {
                            let _ = writeln!(dec, "    case {ord}u: return 0;");
                        }
                    }
                }
                if union.is_empty() {
                    union.push_str("        char none;\n");
                }
                let _ = writeln!(self.decls, "/** Enumeration `{name}`: `tag` is a `{}_*` constant, the payload in `u`. */\ntypedef struct {c} {{\n    uint32_t tag;\n    union {{\n{union}    }} u;\n}} {c};\n", format!("{}_{m}", self.p).to_ascii_uppercase());
                self.proto(&format!("static void enc_{m}(fidl_enc *e, const {c} *v)"));
                let _ = writeln!(self.funcs, "static void enc_{m}(fidl_enc *e, const {c} *v) {{\n    fidl_put_u32(e, v->tag);\n    switch (v->tag) {{\n{enc}    default: break;\n    }}\n}}");
                self.proto(&format!("static int dec_{m}(fidl_dec *d, {c} *v)"));
                let _ = writeln!(self.funcs, "static int dec_{m}(fidl_dec *d, {c} *v) {{\n    memset(v, 0, sizeof *v);\n    if (fidl_u32(d, &v->tag)) return -1;\n    switch (v->tag) {{\n{dec}    default: return fidl_fail(d, \"{name} has no such variant\");\n    }}\n}}");
                self.proto(&format!("static void free_{m}({c} *v)"));
                let _ = writeln!(self.funcs, "static void free_{m}({c} *v) {{\n    switch (v->tag) {{\n{free}    default: break;\n    }}\n}}");
            }
            return Ok(Ty { c, m, min: 4, optional: false });
        }
        for (key, handle, kind, add, take) in [
            ("send_right", "ferry_send_right *", "FERRY_ITEM_SEND_RIGHT", "ferry_message_add_send_right", "ferry_message_take_send_right"),
            ("send_once_right", "ferry_send_once_right *", "FERRY_ITEM_SEND_ONCE_RIGHT", "ferry_message_add_send_once_right", "ferry_message_take_send_once_right"),
            ("receive_right", "ferry_receive_right *", "FERRY_ITEM_RECEIVE_RIGHT", "ferry_message_add_receive_right", "ferry_message_take_receive_right"),
        ] {
            if o.contains_key(key) {
                let m = key.to_owned();
                let free_fn = format!("ferry_{}_free", key);
                self.once(&m.clone(), t, |g| {
                    g.proto(&format!("static void enc_{m}(fidl_enc *e, {handle} const *v)"));
                    let _ = writeln!(g.funcs, "static void enc_{m}(fidl_enc *e, {handle} const *v) {{\n    /* The right is consumed by the message whatever happens. */\n    fidl_put_u32(e, e->items++);\n    if (e->st == FERRY_OK) e->st = {add}(e->msg, *v);\n    else {free_fn}(*v);\n}}");
                    g.proto(&format!("static int dec_{m}(fidl_dec *d, {handle}*v)"));
                    let _ = writeln!(g.funcs, "static int dec_{m}(fidl_dec *d, {handle}*v) {{\n    uint32_t i;\n    ferry_item_kind k;\n    if (fidl_item(d, &i)) return -1;\n    if (ferry_message_item_kind(d->msg, i, &k) != FERRY_OK || k != {kind}) return fidl_fail(d, \"an item is not a {}\");\n    if ({take}(d->msg, i, v) != FERRY_OK) return fidl_fail(d, \"an item could not be taken\");\n    return 0;\n}}", key.replace('_', " "));
                    g.proto(&format!("static void free_{m}({handle}*v)"));
                    let _ = writeln!(g.funcs, "static void free_{m}({handle}*v) {{ {free_fn}(*v); *v = NULL; }}");
                })?;
                return Ok(Ty { c: handle.trim_end().into(), m, min: 4, optional: false });
            }
        }
        if let Some(mode) = o.get("region").and_then(Value::as_str) {
            let (m, check) = match mode {
                "by_value" => ("region_by_value", "mode == FERRY_REGION_COPY || mode == FERRY_REGION_MOVE"),
                "lend" => ("region_lend", "mode == FERRY_REGION_LEND"),
                "share" => ("region_share", "mode == FERRY_REGION_SHARE"),
                "any" => ("region_any", "1"),
                other => return Err(bad(format!("unknown region mode {other:?}"))),
            };
            let flags = if mode == "by_value" { "FERRY_MAP_READ_ONLY" } else { "FERRY_MAP_READ_ONLY | FERRY_MAP_ALLOW_SENDER_WRITES" };
            self.once(m, t, |g| {
                g.proto(&format!("static void enc_{m}(fidl_enc *e, const ferry_idl_region *v)"));
                let _ = writeln!(g.funcs, "static void enc_{m}(fidl_enc *e, const ferry_idl_region *v) {{\n    /* Sent by copy: the region stays the caller's. */\n    fidl_put_u32(e, e->items++);\n    if (e->st == FERRY_OK) e->st = v->out == NULL ? FERRY_ERR_NULL : ferry_message_add_region_copy(e->msg, v->out);\n}}");
                g.proto(&format!("static int dec_{m}(fidl_dec *d, ferry_idl_region *v)"));
                let _ = writeln!(g.funcs, "static int dec_{m}(fidl_dec *d, ferry_idl_region *v) {{\n    uint32_t i;\n    size_t len;\n    ferry_region_mode mode;\n    ferry_item_kind k;\n    v->out = NULL;\n    v->in = NULL;\n    if (fidl_item(d, &i)) return -1;\n    if (ferry_message_item_kind(d->msg, i, &k) != FERRY_OK || k != FERRY_ITEM_REGION) return fidl_fail(d, \"an item is not a region\");\n    if (ferry_message_region_info(d->msg, i, &len, &mode) != FERRY_OK || !({check})) return fidl_fail(d, \"a region travels in another mode than declared\");\n    if (ferry_message_map_region(d->msg, i, {flags}, &v->in) != FERRY_OK) return fidl_fail(d, \"a region could not be mapped\");\n    return 0;\n}}");
                g.proto(&format!("static void free_{m}(ferry_idl_region *v)"));
                let _ = writeln!(g.funcs, "static void free_{m}(ferry_idl_region *v) {{ ferry_mapped_region_free(v->in); v->in = NULL; }}");
            })?;
            return Ok(Ty { c: "ferry_idl_region".into(), m: m.into(), min: 4, optional: false });
        }
        Err(bad(format!("unknown type {t}")))
    }

    fn scalar(&mut self, s: &str, c: &str) -> Result<(), CError> {
        self.once(s, &Value::String(s.to_owned()), |g| {
            g.proto(&format!("static void enc_{s}(fidl_enc *e, const {c} *v)"));
            let _ = writeln!(g.funcs, "static void enc_{s}(fidl_enc *e, const {c} *v) {{ uint8_t b[sizeof *v]; fidl_le(b, v, sizeof *v); fidl_put(e, b, sizeof b); }}");
            g.proto(&format!("static int dec_{s}(fidl_dec *d, {c} *v)"));
            let _ = writeln!(g.funcs, "static int dec_{s}(fidl_dec *d, {c} *v) {{\n    const uint8_t *b;\n    if (fidl_take(d, sizeof *v, &b)) return -1;\n    fidl_le(v, b, sizeof *v);\n    return 0;\n}}");
            g.proto(&format!("static void free_{s}({c} *v)"));
            let _ = writeln!(g.funcs, "static void free_{s}({c} *v) {{ (void)v; }}");
        })
    }

    /// Claims `stem` for `what` (defined as `def`): true the first time,
    /// false when the same thing claims it again.
    ///
    /// # Errors
    /// When something else has the stem.
    fn claim(&mut self, stem: &str, what: &str, def: &Value) -> Result<bool, CError> {
        match self.names.get(stem) {
            None => {
                self.names.insert(stem.to_owned(), (what.to_owned(), def.clone()));
                Ok(true)
            }
            Some((w, d)) if w == what && d == def => Ok(false),
            Some((w, _)) if w == what => Err(bad(format!("{what} is described twice, differently; rename one"))),
            Some((w, _)) => Err(bad(format!("{what} and {w} would have the same name in C (from `{stem}`); rename one"))),
        }
    }

    /// Claims a type's stem `m` (its C type and helpers, and its public
    /// free function); true the first time.
    fn claim_type(&mut self, m: &str, what: &str, def: &Value) -> Result<bool, CError> {
        let first = self.claim(m, what, def)?;
        self.claim(&format!("free_{m}"), what, def)?;
        Ok(first)
    }

    /// Runs `f`, which writes the helpers of type `t` named from `key`, the
    /// first time `key` is asked for.
    fn once(&mut self, key: &str, t: &Value, f: impl FnOnce(&mut Gen)) -> Result<(), CError> {
        if self.claim_type(key, &format!("the type {t}"), t)? {
            f(self);
        }
        Ok(())
    }

    fn proto(&mut self, sig: &str) {
        let _ = writeln!(self.protos, "{sig};");
    }

    /// The code of a record's fields (or an operation's arguments) reached
    /// through `access` (`v->` or `a->`).
    fn fields_code(&mut self, fields: &[Value], what: &str, access: &str) -> Result<Fields, CError> {
        let mut out = Fields::default();
        let mut dec_cases = String::new();
        let mut seen = Vec::new();
        let mut seen_ords = Vec::new();
        for f in fields {
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("{what}: a field without a name")))?;
            if !ident_ok(name) {
                return Err(bad(format!("{what}: field name {name:?} is not a C identifier")));
            }
            let ord = f.get("ordinal").and_then(Value::as_u64).ok_or_else(|| bad(format!("{what}: field {name} without an ordinal")))?;
            // A field's ordinal is a u16 on the wire, and each field is a
            // member (and an argument a parameter) of its own.
            if ord > u64::from(u16::MAX) || seen_ords.contains(&ord) {
                return Err(bad(format!("{what}: field {name}'s ordinal {ord} is over {} or used twice", u16::MAX)));
            }
            seen_ords.push(ord);
            let t = self.ty(f.get("type").ok_or_else(|| bad(format!("{what}: field {name} without a type")))?)?;
            let name = member(name);
            if seen.iter().any(|(s, _): &(String, bool)| *s == name || param(s) == param(&name)) {
                return Err(bad(format!("{what}: two fields are named {name} in C")));
            }
            let _ = writeln!(out.enc, "    {{\n        uint16_t ord = {ord};\n        fidl_le_put(e, &ord, 2);\n        size_t f = fidl_begin(e);\n        enc_{}(e, &{access}{name});\n        fidl_end(e, f);\n    }}", t.m);
            let _ = writeln!(
                dec_cases,
                "        case {ord}:\n            if (seen_{name}) return fidl_fail(d, \"{what}: a field appears twice\");\n            seen_{name} = 1;\n            d->end = d->pos + len;\n            if (dec_{}(d, &{access}{name})) return -1;\n            if (d->pos != d->end) return fidl_fail(d, \"bytes left over after a field\");\n            break;",
                t.m
            );
            let _ = writeln!(out.free, "    free_{}(&{access}{name});", t.m);
            seen.push((name.to_owned(), t.optional));
            out.types.push((name.to_owned(), t));
        }
        let mut dec = String::new();
        for (name, _) in &seen {
            let _ = writeln!(dec, "    int seen_{name} = 0;");
        }
        let _ = writeln!(dec, "    size_t limit = d->end;\n    while (d->pos < limit) {{\n        uint16_t ord;\n        uint32_t len;\n        const uint8_t *b;\n        if (fidl_take(d, 2, &b)) return -1;\n        fidl_le(&ord, b, 2);\n        if (fidl_u32(d, &len)) return -1;\n        if (len > limit - d->pos) return fidl_fail(d, \"a field is cut short\");\n        switch (ord) {{\n{dec_cases}        default:\n            d->pos += len; /* a field this definition does not know */\n            break;\n        }}\n        d->end = limit;\n    }}");
        for (name, optional) in &seen {
            if !optional {
                let _ = writeln!(dec, "    if (!seen_{name}) return fidl_fail(d, \"{what}: a required field is missing\");");
            }
        }
        dec.push_str("    return 0;\n");
        out.dec = dec;
        Ok(out)
    }
}

#[derive(Default)]
struct Fields {
    types: Vec<(String, Ty)>,
    enc: String,
    dec: String,
    free: String,
}

const RUNTIME_H: &str = r#"#ifndef FERRY_IDL_RUNTIME_H
#define FERRY_IDL_RUNTIME_H
/** Bytes: a string (UTF-8, NUL-terminated too when decoded) or a byte list.
 * Decoded ones are malloc'ed and freed by the matching free function. */
typedef struct ferry_idl_bytes {
    uint8_t *data;
    size_t len;
} ferry_idl_bytes;

/** A region argument or result: `out` is sent by copy (it stays the
 * sender's), `in` is a received region mapped read-only. */
typedef struct ferry_idl_region {
    ferry_region *out;
    ferry_mapped_region *in;
} ferry_idl_region;

/** Outcomes of a typed call besides the `ferry_status` values. */
enum {
    /** The operation answered with its typed error (in `*error`). */
    FERRY_IDL_APP_ERROR = 1000,
    /** The server refused the request: `fault_code` and `fault` say why. */
    FERRY_IDL_FAULT = 1001,
    /** The reply does not decode as the result (`fault` says why). */
    FERRY_IDL_BAD_REPLY = 1002,
    /** The reply's code is none of OK, ERR, FAULT. */
    FERRY_IDL_UNEXPECTED_REPLY = 1003,
    /** The version check failed (another interface, or too old). */
    FERRY_IDL_INCOMPATIBLE = 1004,
};

/** Reply operation ids. Bit 31 marks an answer: no request carries it,
 * and a server drops a message whose id has it without running or
 * answering anything (an answer a client sent on to another server, by
 * naming that server's port as its reply right, is never taken there as a
 * request of the answer's sender). Operation ordinals stay below it. */
#define FERRY_IDL_ANSWER 0x80000000u
#define FERRY_IDL_REPLY_OK 0x80000000u
#define FERRY_IDL_REPLY_ERR 0x80000001u
#define FERRY_IDL_REPLY_FAULT 0x80000002u

/** Fault codes (`fault_code`), as in Rust's `Fault`. */
enum {
    FERRY_IDL_FAULT_UNKNOWN_OPERATION = 1,
    FERRY_IDL_FAULT_BAD_REQUEST = 2,
    FERRY_IDL_FAULT_INCOMPATIBLE = 3,
    FERRY_IDL_FAULT_REPLY_TOO_LARGE = 4,
};

/** A typed client: over a port (`to`) or an RPC connection (`conn`). */
typedef struct ferry_idl_client {
    ferry_send_right *to;
    ferry_connection *conn;
    ferry_receive_right *reply_port;
    int64_t timeout_ms;
    uint32_t peer_version;
    uint32_t fault_code;
    char fault[256];
} ferry_idl_client;
#endif
"#;

const RUNTIME_C: &str = r#"/* ---- the encoding's building blocks (crates/ferry-idl/src/codec.rs) ---- */

#define FIDL_MAX_DEPTH 32

/* Answers (FERRY_IDL_ANSWER) that arrived as requests and were dropped. */
static unsigned long long fidl_answers_dropped;

/* Counts an answer that reached this server as a request and says so on
 * standard error at most once a minute; the caller drops it unanswered
 * (an answer to an answer could go back and forth between two servers). */
static void fidl_drop_answer(const char *iface, uint32_t op) {
    static time_t said;
    time_t now = time(NULL);
    fidl_answers_dropped++;
    if (said == 0 || now - said >= 60) {
        said = now;
        fprintf(stderr, "ferry: %s: dropped an answer (operation id %#x) that arrived as a request; %llu so far (said at most once a minute)\n", iface, (unsigned)op, fidl_answers_dropped);
    }
}

typedef struct {
    uint8_t *buf;
    size_t len, cap;
    ferry_message *msg;
    uint32_t items;
    ferry_status st;
} fidl_enc;

typedef struct {
    const uint8_t *buf;
    size_t pos, end, len;
    ferry_message *msg;
    size_t nitems;
    uint8_t *claimed;
    int depth;
    char err[200];
} fidl_dec;

/* Little-endian copy of n bytes (this code assumes a little-endian host, as
 * ferry does: Linux on x86-64 and aarch64). */
static void fidl_le(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }

static void fidl_put(fidl_enc *e, const void *p, size_t n) {
    if (e->st != FERRY_OK || n == 0)
        return;
    if (e->len + n > e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        while (cap < e->len + n)
            cap *= 2;
        uint8_t *b = (uint8_t *)realloc(e->buf, cap);
        if (b == NULL) {
            e->st = FERRY_ERR_IO;
            return;
        }
        e->buf = b;
        e->cap = cap;
    }
    memcpy(e->buf + e->len, p, n);
    e->len += n;
}

static void fidl_le_put(fidl_enc *e, const void *p, size_t n) { fidl_put(e, p, n); }

static void fidl_put_u32(fidl_enc *e, uint32_t v) { fidl_put(e, &v, 4); }

static size_t fidl_begin(fidl_enc *e) {
    size_t at = e->len;
    fidl_put_u32(e, 0);
    return at;
}

static void fidl_end(fidl_enc *e, size_t at) {
    if (e->st != FERRY_OK)
        return;
    uint32_t n = (uint32_t)(e->len - at - 4);
    memcpy(e->buf + at, &n, 4);
}

static int fidl_fail(fidl_dec *d, const char *why) {
    if (d->err[0] == 0)
        snprintf(d->err, sizeof d->err, "%s", why);
    return -1;
}

static int fidl_take(fidl_dec *d, size_t n, const uint8_t **out) {
    if (n > d->end - d->pos)
        return fidl_fail(d, "truncated: a value is cut short");
    *out = d->buf + d->pos;
    d->pos += n;
    return 0;
}

static int fidl_u32(fidl_dec *d, uint32_t *v) {
    const uint8_t *b;
    if (fidl_take(d, 4, &b))
        return -1;
    memcpy(v, b, 4);
    return 0;
}

static int fidl_count(fidl_dec *d, size_t min, uint32_t *n) {
    if (fidl_u32(d, n))
        return -1;
    if (min == 0 ? *n > FERRY_IDL_MAX_COUNT : (uint64_t)*n * min > d->end - d->pos)
        return fidl_fail(d, "a count exceeds what the message holds");
    return 0;
}

static int fidl_item(fidl_dec *d, uint32_t *i) {
    if (fidl_u32(d, i))
        return -1;
    if (*i >= d->nitems)
        return fidl_fail(d, "an item does not exist");
    if (d->claimed[*i])
        return fidl_fail(d, "an item is claimed twice");
    d->claimed[*i] = 1;
    return 0;
}

static int fidl_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (k > n - i - 1) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += k + 1;
    }
    return 1;
}

/* A decoder over a received message's body and items. */
static int fidl_dec_init(fidl_dec *d, ferry_message *m) {
    memset(d, 0, sizeof *d);
    d->msg = m;
    if (ferry_message_body(m, &d->buf, &d->len) != FERRY_OK || ferry_message_item_count(m, &d->nitems) != FERRY_OK)
        return fidl_fail(d, "not a readable message");
    d->end = d->len;
    if (d->nitems) {
        d->claimed = (uint8_t *)calloc(d->nitems, 1);
        if (d->claimed == NULL)
            return fidl_fail(d, "out of memory");
    }
    return 0;
}

/* Every byte and every item used. */
static int fidl_finish(fidl_dec *d) {
    if (d->pos != d->len)
        return fidl_fail(d, "bytes left over after the value");
    for (size_t i = 0; i < d->nitems; i++)
        if (!d->claimed[i])
            return fidl_fail(d, "an item is claimed by no value");
    return 0;
}

static void fidl_dec_free(fidl_dec *d) { free(d->claimed); d->claimed = NULL; }

/* Starts a message: the body comes at the end (fidl_enc_finish). */
static ferry_status fidl_enc_init(fidl_enc *e, ferry_message *m) {
    memset(e, 0, sizeof *e);
    e->msg = m;
    return FERRY_OK;
}

static ferry_status fidl_enc_finish(fidl_enc *e) {
    ferry_status st = e->st;
    if (st == FERRY_OK)
        st = ferry_message_set_body(e->msg, e->buf, e->len);
    free(e->buf);
    e->buf = NULL;
    return st;
}

/* An empty reply to `request` with code `op`: an RPC reply remembering
 * its connection, or a plain message for a request that came by port. */
static ferry_status fidl_new_reply(ferry_message *request, uint32_t op, ferry_message **out) {
    ferry_status st = ferry_message_new_reply(request, op, out);
    if (st == FERRY_ERR_NO_REPLY_RIGHT)
        st = ferry_message_new(op, out);
    return st;
}

/* A fault reply to `request`: code, then the text as a string. */
static ferry_message *fidl_fault(ferry_message *request, uint32_t code, const char *text) {
    ferry_message *r;
    if (fidl_new_reply(request, FERRY_IDL_REPLY_FAULT, &r) != FERRY_OK)
        return NULL;
    fidl_enc e;
    fidl_enc_init(&e, r);
    fidl_put_u32(&e, code);
    fidl_put_u32(&e, (uint32_t)strlen(text));
    fidl_put(&e, text, strlen(text));
    if (fidl_enc_finish(&e) != FERRY_OK) {
        ferry_message_free(r);
        return NULL;
    }
    return r;
}

/* One call through the client's port or connection. */
static ferry_status fidl_call(ferry_idl_client *c, ferry_message *req, ferry_message **reply) {
    if (c->conn != NULL)
        return ferry_connection_call(c->conn, req, c->timeout_ms, reply);
    ferry_status st;
    if (c->reply_port == NULL) {
        ferry_send_right *unused;
        st = ferry_port_new(&c->reply_port, &unused);
        if (st != FERRY_OK)
            return st;
        ferry_send_right_free(unused);
    }
    ferry_send_once_right *once;
    st = ferry_receive_right_make_send_once(c->reply_port, &once);
    if (st == FERRY_OK)
        st = ferry_message_set_reply_send_once(req, once);
    if (st == FERRY_OK)
        st = ferry_send_right_send(c->to, req, c->timeout_ms);
    if (st == FERRY_OK)
        st = ferry_receive_right_recv(c->reply_port, c->timeout_ms, reply);
    if (st != FERRY_OK) {
        /* A late reply must never answer a later call: a fresh port. */
        ferry_receive_right_free(c->reply_port);
        c->reply_port = NULL;
    }
    return st;
}

/* The reply's code: 0 the result follows, 1 the typed error follows,
 * otherwise the call's outcome (a fault is read here). */
static int fidl_reply_code(ferry_idl_client *c, fidl_dec *d, int has_error) {
    uint32_t op;
    if (ferry_message_op(d->msg, &op) != FERRY_OK)
        return FERRY_IDL_BAD_REPLY;
    if (op == FERRY_IDL_REPLY_OK)
        return 0;
    if (op == FERRY_IDL_REPLY_ERR && has_error)
        return 1;
    if (op == FERRY_IDL_REPLY_FAULT) {
        uint32_t code, n;
        const uint8_t *b;
        if (fidl_u32(d, &code) || fidl_count(d, 1, &n) || fidl_take(d, n, &b) || fidl_finish(d))
            return FERRY_IDL_BAD_REPLY;
        c->fault_code = code;
        snprintf(c->fault, sizeof c->fault, "%.*s", (int)n, (const char *)b);
        return FERRY_IDL_FAULT;
    }
    if (op <= 2)
        snprintf(c->fault, sizeof c->fault, "the server answers with reply code %u of the typed protocol before answers were marked: it is too old for this client (upgrade it)", op);
    else
        snprintf(c->fault, sizeof c->fault, "reply code %#x", op);
    return FERRY_IDL_UNEXPECTED_REPLY;
}
"#;

/// Generates the C stubs of the interface `description` (the JSON
/// `describe()` emits, or an object holding it under `"description"`), its
/// C names starting with `prefix` (by default the interface's name with
/// `_` for `.`).
///
/// # Errors
/// A [`CError`] naming what the description lacks or what C cannot name.
pub fn generate(description: &Value, prefix: Option<&str>) -> Result<CStubs, CError> {
    let d = description.get("description").unwrap_or(description);
    let name = d.get("interface").and_then(Value::as_str).ok_or_else(|| bad("no interface name"))?;
    // The name goes into string literals and comments, escaped.
    let iname = c_literal(name);
    let version = d.get("version").and_then(Value::as_u64).ok_or_else(|| bad("no version"))?;
    let compatible = d.get("compatible").and_then(Value::as_u64).ok_or_else(|| bad("no compatible version"))?;
    if version > u64::from(u32::MAX) || compatible > version {
        return Err(bad(format!("version {version} and compatible version {compatible}: versions are u32s, and the compatible one is not above the version")));
    }
    let p = prefix.map(str::to_owned).unwrap_or_else(|| snake(name));
    if !ident_ok(&p) {
        return Err(bad(format!("prefix {p:?} is not a C identifier")));
    }
    if HEADERS.contains(&p.as_str()) {
        return Err(bad(format!("prefix {p:?} would name the stubs' header {p}.h, which hides the header of that name the stubs and their users include; give another prefix")));
    }
    let ops = d.get("operations").and_then(Value::as_array).ok_or_else(|| bad("no operations"))?;
    let mut g = Gen { p: p.clone(), decls: String::new(), consts: String::new(), funcs: String::new(), protos: String::new(), names: BTreeMap::new() };
    // The stubs' own names.
    for own in ["client", "client_free", "connect_port", "connect_rpc", "dispatch", "server_ops", "serve_port", "serve_rpc", "#NAME", "#VERSION", "#COMPATIBLE"] {
        g.claim(own, &format!("the stubs' own {p}_{}", own.trim_start_matches('#')), &Value::Null)?;
    }
    let upper = p.to_ascii_uppercase();

    let mut api = String::new(); // public prototypes
    let mut client = String::new(); // client functions
    let mut ops_struct = String::new();
    let mut dispatch_cases = String::new();
    let mut seen_ords = Vec::new();
    for op in ops {
        let name = op.get("name").and_then(Value::as_str).ok_or_else(|| bad("an operation without a name"))?;
        if !ident_ok(name) {
            return Err(bad(format!("operation name {name:?} is not a C identifier")));
        }
        let ord = op.get("ordinal").and_then(Value::as_u64).ok_or_else(|| bad(format!("{name} without an ordinal")))?;
        if ord == 0 || seen_ords.contains(&ord) {
            return Err(bad(format!("{name}: ordinal {ord} is 0 or used twice")));
        }
        if ord >= u64::from(ferry::idl::ANSWER) {
            return Err(bad(format!("{name}: ordinal {ord} is not below 2^31 (operation ids with bit 31 set are answers)")));
        }
        seen_ords.push(ord);
        let what = format!("operation {name}");
        g.claim(name, &what, op)?;
        g.claim_type(&format!("{name}_args"), &what, op)?;
        g.claim(&format!("#OP_{}", name.to_ascii_uppercase()), &what, op)?;
        // The server's table names the operation as a struct member.
        let op_member = member(name);
        let oneway = op.get("kind").and_then(Value::as_str) == Some("oneway");
        let args = op.get("args").and_then(Value::as_array).cloned().unwrap_or_default();
        // The arguments as a record struct of their own.
        let args_c = format!("{p}_{name}_args");
        let fields = g.fields_code(&args, name, "a->")?;
        let mut decl = format!("/** The arguments of `{name}`. */\ntypedef struct {args_c} {{\n");
        for (f, t) in &fields.types {
            let _ = writeln!(decl, "    {} {};", t.c, f);
        }
        if fields.types.is_empty() {
            decl.push_str("    char unused;\n");
        }
        let _ = writeln!(decl, "}} {args_c};\n");
        g.decls.push_str(&decl);
        let _ = writeln!(g.funcs, "static void enc_{name}_args(fidl_enc *e, const {args_c} *a) {{\n    (void)e;\n    (void)a;\n{}}}", fields.enc);
        let _ = writeln!(g.funcs, "static int dec_{name}_args(fidl_dec *d, {args_c} *a) {{\n    (void)a;\n{}}}", fields.dec);
        let _ = writeln!(g.funcs, "static void free_{name}_args({args_c} *a) {{\n{}    (void)a;\n}}", fields.free);

        let result = op.get("result").cloned().unwrap_or(Value::Null);
        let rt = if result == "unit" || result.is_null() { None } else { Some(g.ty(&result)?) };
        let et = match op.get("error") {
            Some(e) if !e.is_null() => Some(g.ty(e)?),
            _ => None,
        };
        let konst = format!("{upper}_OP_{}", name.to_ascii_uppercase());
        let _ = writeln!(g.consts, "/** Operation `{name}`'s ordinal. */\n#define {konst} {ord}u");

        // The client function. Its definition names the arguments
        // `arg_NAME`, so that no argument hides one of its variables or a
        // function it calls; its prototype names them as the description
        // does, but for one named like another parameter.
        let (mut params, mut def_params) = (format!("{p}_client *c"), format!("{p}_client *c"));
        for (f, t) in &fields.types {
            let _ = write!(params, ", {} *{}", t.c, param(f));
            let _ = write!(def_params, ", {} *arg_{f}", t.c);
        }
        for (t, fixed) in [(&rt, "result"), (&et, "error")] {
            if let Some(t) = t {
                let _ = write!(params, ", {} *{fixed}", t.c);
                let _ = write!(def_params, ", {} *{fixed}", t.c);
            }
        }
        let doc = op.get("doc").and_then(Value::as_str).unwrap_or("").replace("*/", "* /");
        let _ = writeln!(
            api,
            "/** `{name}` (ordinal {ord}){}: {doc}\n * Returns FERRY_OK{}{}, FERRY_IDL_FAULT (the server refused: c->fault), FERRY_IDL_BAD_REPLY, or the transport's ferry_status. Rights among the arguments are consumed; decoded results are the caller's (free with {p}_free_*). */\nint {p}_{name}({params});",
            if oneway { ", one-way" } else { "" },
            if rt.is_some() { " with *result set" } else { "" },
            if et.is_some() { ", FERRY_IDL_APP_ERROR with *error set" } else { "" }
        );
        let mut args_init = format!("    {args_c} a;\n    memset(&a, 0, sizeof a);\n");
        for (f, _) in &fields.types {
            let _ = writeln!(args_init, "    a.{f} = *arg_{f};");
        }
        // `result` and `error` are the caller's, maybe never initialised
        // (a local): zeroed before decoding, so that freeing what a failed
        // decode left frees only what it decoded.
        let (res_dec, err_dec) = (
            rt.as_ref().map_or("    r = 0;\n".to_owned(), |t| format!("        memset(result, 0, sizeof *result);\n        r = dec_{}(&d, result);\n", t.m)),
            et.as_ref().map_or(String::new(), |t| format!("        memset(error, 0, sizeof *error);\n        r = dec_{}(&d, error);\n", t.m)),
        );
        let _ = writeln!(
            client,
            "int {p}_{name}({def_params}) {{\n{args_init}    ferry_message *m, *reply = NULL;\n    ferry_status st = ferry_message_new({ord}, &m);\n    if (st != FERRY_OK) return st;\n    fidl_enc e;\n    fidl_enc_init(&e, m);\n    enc_{name}_args(&e, &a);\n    st = fidl_enc_finish(&e);\n    if (st != FERRY_OK) {{ ferry_message_free(m); return st; }}\n{}    st = fidl_call(c, m, &reply);\n    ferry_message_free(m);\n    if (st != FERRY_OK) return st;\n{}}}",
            if oneway {
                "    if (c->conn == NULL) {\n        st = ferry_send_right_send(c->to, m, c->timeout_ms);\n        ferry_message_free(m);\n        return st;\n    }\n"
            } else {
                ""
            },
            if oneway {
                "    ferry_message_free(reply);\n    return FERRY_OK;\n".to_owned()
            } else {
                format!(
                    "    fidl_dec d;\n    int r = -1;\n    if (fidl_dec_init(&d, reply)) {{ fidl_dec_free(&d); ferry_message_free(reply); return FERRY_IDL_BAD_REPLY; }}\n    int code = fidl_reply_code(c, &d, {});\n    if (code == 0) {{\n{res_dec}        if (r == 0 && fidl_finish(&d) == 0) {{ fidl_dec_free(&d); ferry_message_free(reply); return FERRY_OK; }}\n{}    }} else if (code == 1) {{\n{err_dec}        if (r == 0 && fidl_finish(&d) == 0) {{ fidl_dec_free(&d); ferry_message_free(reply); return FERRY_IDL_APP_ERROR; }}\n{}    }} else {{\n        fidl_dec_free(&d);\n        ferry_message_free(reply);\n        return code;\n    }}\n    snprintf(c->fault, sizeof c->fault, \"%s\", d.err);\n    fidl_dec_free(&d);\n    ferry_message_free(reply);\n    return FERRY_IDL_BAD_REPLY;\n",
                    u8::from(et.is_some()),
                    rt.as_ref().map_or(String::new(), |t| format!("        free_{}(result);\n", t.m)),
                    et.as_ref().map_or(String::new(), |t| format!("        free_{}(error);\n", t.m)),
                )
            }
        );

        // The server's function and its dispatch case.
        let mut sig = "void *ctx".to_owned();
        for (f, t) in &fields.types {
            let _ = write!(sig, ", {} *{}", t.c, param(f));
        }
        if let Some(t) = &rt {
            let _ = write!(sig, ", {} *result", t.c);
        }
        if let Some(t) = &et {
            let _ = write!(sig, ", {} *error", t.c);
        }
        let _ = writeln!(ops_struct, "    /** `{name}`: return 0 with *result set{}{}. The arguments are freed after it returns (take a right out by setting it to NULL); results are freed after they are sent, regions' `out` excepted. */\n    int (*{op_member})({sig});", if et.is_some() { ", or 1 with *error set" } else { "" }, if oneway { "" } else { " (any other value is answered with fault 4)" });
        let mut call_args = "ctx".to_owned();
        for (f, _) in &fields.types {
            let _ = write!(call_args, ", &a.{f}");
        }
        let mut locals = String::new();
        if let Some(t) = &rt {
            let _ = writeln!(locals, "        {} result;\n        memset(&result, 0, sizeof result);", t.c);
            call_args.push_str(", &result");
        }
        if let Some(t) = &et {
            let _ = writeln!(locals, "        {} error;\n        memset(&error, 0, sizeof error);", t.c);
            call_args.push_str(", &error");
        }
        let reply_enc = if oneway {
            "        *ran = 1;\n        free_ARGS(&a);\n        if (has_reply) return fidl_ok_reply(request);\n        return NULL;\n".replace("ARGS", &format!("{name}_args"))
        } else {
            format!(
                "        *ran = 1;\n        ferry_message *r = NULL;\n        if (fidl_new_reply(request, rc == 1 ? FERRY_IDL_REPLY_ERR : FERRY_IDL_REPLY_OK, &r) == FERRY_OK) {{\n            fidl_enc e;\n            fidl_enc_init(&e, r);\n{}{}            if (fidl_enc_finish(&e) != FERRY_OK) {{ ferry_message_free(r); r = fidl_fault(request, 4, \"the reply could not be encoded\"); }}\n        }}\n{}{}        free_{name}_args(&a);\n        return r;\n",
                rt.as_ref().map_or(String::new(), |t| format!("            if (rc == 0) enc_{}(&e, &result);\n", t.m)),
                et.as_ref().map_or(String::new(), |t| format!("            if (rc == 1) enc_{}(&e, &error);\n", t.m)),
                rt.as_ref().map_or(String::new(), |t| format!("        free_{}(&result);\n", t.m)),
                et.as_ref().map_or(String::new(), |t| format!("        free_{}(&error);\n", t.m)),
            )
        };
        // A return value the operation does not define (a function that
        // failed returns -1, say) has neither a result nor a typed error to
        // send: fault 4, never a success with a result it did not set.
        let rc_check = if oneway {
            String::new()
        } else {
            format!(
                "        if ({}) {{\n            char why[96];\n            snprintf(why, sizeof why, \"the implementation returned %d, which the operation does not define\", rc);\n{}{}            free_{name}_args(&a);\n            *ran = 1;\n            return fidl_fault(request, 4, why);\n        }}\n",
                if et.is_some() { "rc != 0 && rc != 1" } else { "rc != 0" },
                rt.as_ref().map_or(String::new(), |t| format!("            free_{}(&result);\n", t.m)),
                et.as_ref().map_or(String::new(), |t| format!("            free_{}(&error);\n", t.m)),
            )
        };
        let _ = writeln!(
            dispatch_cases,
            "    case {ord}u: {{\n        if (ops->{op_member} == NULL) return fidl_fault(request, 1, \"{ord}\");\n        {args_c} a;\n        memset(&a, 0, sizeof a);\n        if (dec_{name}_args(d, &a) || fidl_finish(d)) {{\n            ferry_message *f = fidl_fault(request, 2, d->err);\n            free_{name}_args(&a);\n            return f;\n        }}\n{locals}        int rc = ops->{op_member}({call_args});\n{}        (void)rc;\n{reply_enc}    }}",
            rc_check
        );
    }

    let mut h = String::new();
    let guard = format!("{upper}_IDL_H");
    let _ = writeln!(
        h,
        "/* C stubs of the interface \"{iname}\" version {version} (compatible {compatible}),\n * generated by ferry-idl-c from its description; do not edit. */\n#ifndef {guard}\n#define {guard}\n\n#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n\n#include \"ferry.h\"\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n\n{RUNTIME_H}\n/** The interface's name and versions. */\n#define {upper}_NAME \"{iname}\"\n#define {upper}_VERSION {version}u\n#define {upper}_COMPATIBLE {compatible}u\n\n{}\n{}\n/** A client of \"{iname}\". */\ntypedef ferry_idl_client {p}_client;\n\n/** A client over a port: consumes `to`, makes the version check. Returns FERRY_OK, FERRY_IDL_INCOMPATIBLE, FERRY_IDL_FAULT or the transport's status. */\nint {p}_connect_port(ferry_send_right *to, int64_t timeout_ms, {p}_client **out);\n/** A client over an RPC connection (the fast path for calls that fit the slot): consumes `conn`, makes the version check. */\nint {p}_connect_rpc(ferry_connection *conn, int64_t timeout_ms, {p}_client **out);\n/** Frees a client and the right or connection it holds. NULL is ignored. */\nvoid {p}_client_free({p}_client *c);\n\n{api}\n/** The server: one function per operation (NULL answers UnknownOperation). */\ntypedef struct {p}_server_ops {{\n{ops_struct}}} {p}_server_ops;\n\n/** Answers one request: decodes and checks every argument first (a request that does not match gets a BadRequest fault and never reaches `ops`), then calls the operation. Returns the reply to send (NULL for a one-way operation without a reply right, for an answer (an id with FERRY_IDL_ANSWER), which is never a request and is dropped, or out of memory); `*ran` says whether `ops` ran. */\nferry_message *{p}_dispatch(const {p}_server_ops *ops, void *ctx, ferry_message *request, int *ran);\n/** Serves requests arriving on `rx` until no sender is left (FERRY_OK) or another failure (its status); a malformed message and a send-once right to `rx` freed unused are skipped; a call without a reply right is not run. */\nferry_status {p}_serve_port(const {p}_server_ops *ops, void *ctx, ferry_receive_right *rx, int64_t timeout_ms);\n/** Serves calls on an RPC server until it has no clients left. */\nferry_status {p}_serve_rpc(const {p}_server_ops *ops, void *ctx, ferry_rpc_server *server, int64_t timeout_ms);\n\n#ifdef __cplusplus\n}}\n#endif\n#endif",
        g.consts,
        g.decls,
    );
    // Free functions for every decoded type the user sees.
    let mut frees = String::new();
    let mut h_frees = String::new();
    let mut names: Vec<(String, String)> = Vec::new();
    for line in g.protos.lines() {
        if let Some(rest) = line.strip_prefix("static void free_") {
            let (m, arg) = rest.split_once('(').expect("a prototype");
            let ty = arg.trim_end_matches(");").trim_end_matches(" *v").trim_end_matches("*v").trim().to_owned();
            names.push((m.to_owned(), ty));
        }
    }
    for (m, ty) in &names {
        let _ = writeln!(h_frees, "/** Frees what a decoded `{ty}` holds. */\nvoid {p}_free_{m}({ty} *v);");
        let _ = writeln!(frees, "void {p}_free_{m}({ty} *v) {{ free_{m}(v); }}");
    }
    let h = h.replace(&format!("\n{api}"), &format!("\n{api}\n{h_frees}"));

    let mut c = String::new();
    let _ = writeln!(
        c,
        "/* C stubs of the interface \"{iname}\", generated by ferry-idl-c; do not edit. */\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <time.h>\n\n#include \"{p}.h\"\n\n/* Not every type's helpers are used by every interface. */\n#pragma GCC diagnostic ignored \"-Wunused-function\"\n\n#define FERRY_IDL_MAX_COUNT 65536u\n\n{RUNTIME_C}\n{}\nstatic ferry_message *fidl_ok_reply(ferry_message *request) {{\n    ferry_message *r;\n    return fidl_new_reply(request, FERRY_IDL_REPLY_OK, &r) == FERRY_OK ? r : NULL;\n}}\n\n{}\n{frees}",
        g.protos, g.funcs
    );
    // The version check: the Hello record, written by hand (it is the same
    // for every interface).
    let _ = writeln!(
        c,
        r#"/* ---- the version check (operation 0) ---- */

static void fidl_enc_hello(fidl_enc *e) {{
    static const char name[] = {upper}_NAME;
    uint32_t v = {upper}_VERSION, cv = {upper}_COMPATIBLE;
    uint16_t ord;
    size_t at = fidl_begin(e), f;
    ord = 1; fidl_put(e, &ord, 2); f = fidl_begin(e); fidl_put_u32(e, sizeof name - 1); fidl_put(e, name, sizeof name - 1); fidl_end(e, f);
    ord = 2; fidl_put(e, &ord, 2); f = fidl_begin(e); fidl_put_u32(e, v); fidl_end(e, f);
    ord = 3; fidl_put(e, &ord, 2); f = fidl_begin(e); fidl_put_u32(e, cv); fidl_end(e, f);
    fidl_end(e, at);
}}

/* Reads a Hello record: the name (compared with ours), version, compatible. */
static int fidl_dec_hello(fidl_dec *d, int *same_name, uint32_t *version, uint32_t *compatible) {{
    static const char name[] = {upper}_NAME;
    uint32_t len;
    int seen[4] = {{0, 0, 0, 0}};
    if (fidl_u32(d, &len)) return -1;
    if (len > d->end - d->pos) return fidl_fail(d, "the version check is cut short");
    size_t limit = d->pos + len;
    while (d->pos < limit) {{
        uint16_t ord;
        uint32_t n, flen;
        const uint8_t *b;
        if (fidl_take(d, 2, &b)) return -1;
        memcpy(&ord, b, 2);
        if (fidl_u32(d, &flen)) return -1;
        if (flen > limit - d->pos) return fidl_fail(d, "a field is cut short");
        size_t end = d->pos + flen;
        if (ord >= 1 && ord <= 3) {{
            if (seen[ord]) return fidl_fail(d, "a field appears twice");
            seen[ord] = 1;
        }}
        if (ord == 1) {{
            if (fidl_u32(d, &n) || fidl_take(d, n, &b)) return -1;
            *same_name = n == sizeof name - 1 && memcmp(b, name, n) == 0;
        }} else if (ord == 2) {{
            if (fidl_u32(d, version)) return -1;
        }} else if (ord == 3) {{
            if (fidl_u32(d, compatible)) return -1;
        }} else {{
            d->pos = end;
        }}
        if (d->pos != end) return fidl_fail(d, "bytes left over after a field");
    }}
    if (!seen[1] || !seen[2] || !seen[3]) return fidl_fail(d, "the version check lacks a field");
    return 0;
}}

static int fidl_connect({p}_client *c, {p}_client **out) {{
    ferry_message *m, *reply = NULL;
    ferry_status st = ferry_message_new(0, &m);
    if (st != FERRY_OK) {{ {p}_client_free(c); return st; }}
    fidl_enc e;
    fidl_enc_init(&e, m);
    fidl_enc_hello(&e);
    st = fidl_enc_finish(&e);
    if (st == FERRY_OK) st = fidl_call(c, m, &reply);
    ferry_message_free(m);
    if (st != FERRY_OK) {{ {p}_client_free(c); return st; }}
    fidl_dec d;
    int code = FERRY_IDL_BAD_REPLY;
    if (fidl_dec_init(&d, reply) == 0) {{
        code = fidl_reply_code(c, &d, 0);
        if (code == 0) {{
            int same = 0;
            uint32_t v = 0, cv = 0;
            if (fidl_dec_hello(&d, &same, &v, &cv) || fidl_finish(&d)) code = FERRY_IDL_BAD_REPLY;
            else if (!same || v < {upper}_COMPATIBLE) code = FERRY_IDL_INCOMPATIBLE;
            else c->peer_version = v;
        }} else if (code == FERRY_IDL_FAULT && c->fault_code == FERRY_IDL_FAULT_INCOMPATIBLE) {{
            code = FERRY_IDL_INCOMPATIBLE;
        }}
    }}
    fidl_dec_free(&d);
    ferry_message_free(reply);
    if (code != 0) {{ {p}_client_free(c); return code; }}
    *out = c;
    return FERRY_OK;
}}

int {p}_connect_port(ferry_send_right *to, int64_t timeout_ms, {p}_client **out) {{
    {p}_client *c = ({p}_client *)calloc(1, sizeof *c);
    if (c == NULL) {{ ferry_send_right_free(to); return FERRY_ERR_IO; }}
    c->to = to;
    c->timeout_ms = timeout_ms;
    return fidl_connect(c, out);
}}

int {p}_connect_rpc(ferry_connection *conn, int64_t timeout_ms, {p}_client **out) {{
    {p}_client *c = ({p}_client *)calloc(1, sizeof *c);
    if (c == NULL) {{ ferry_connection_free(conn); return FERRY_ERR_IO; }}
    c->conn = conn;
    c->timeout_ms = timeout_ms;
    return fidl_connect(c, out);
}}

void {p}_client_free({p}_client *c) {{
    if (c == NULL) return;
    ferry_send_right_free(c->to);
    ferry_connection_free(c->conn);
    ferry_receive_right_free(c->reply_port);
    free(c);
}}

{client}
/* ---- the server ---- */

static ferry_message *fidl_answer_hello(ferry_message *request, fidl_dec *d) {{
    int same = 0;
    uint32_t v = 0, cv = 0;
    if (fidl_dec_hello(d, &same, &v, &cv) || fidl_finish(d)) {{
        char why[240];
        snprintf(why, sizeof why, "version check: %s", d->err);
        return fidl_fault(request, 2, why);
    }}
    if (!same) return fidl_fault(request, 3, "this server speaks " {upper}_NAME);
    if (v < {upper}_COMPATIBLE) return fidl_fault(request, 3, "the client's version is older than the oldest this server talks to");
    ferry_message *r;
    if (fidl_new_reply(request, FERRY_IDL_REPLY_OK, &r) != FERRY_OK) return NULL;
    fidl_enc e;
    fidl_enc_init(&e, r);
    fidl_enc_hello(&e);
    if (fidl_enc_finish(&e) != FERRY_OK) {{ ferry_message_free(r); return NULL; }}
    return r;
}}

static ferry_message *fidl_dispatch(const {p}_server_ops *ops, void *ctx, ferry_message *request, fidl_dec *d, int has_reply, int *ran) {{
    uint32_t op;
    (void)has_reply;
    if (ferry_message_op(request, &op) != FERRY_OK) return NULL;
    if (op & FERRY_IDL_ANSWER) {{
        /* An answer sent on to this server: never a request, never answered. */
        fidl_drop_answer({upper}_NAME, op);
        return NULL;
    }}
    if (op == 0) return fidl_answer_hello(request, d);
    switch (op) {{
{dispatch_cases}    default: {{
        char text[16];
        snprintf(text, sizeof text, "%u", op);
        return fidl_fault(request, 1, text);
    }}
    }}
}}

ferry_message *{p}_dispatch(const {p}_server_ops *ops, void *ctx, ferry_message *request, int *ran) {{
    fidl_dec d;
    bool has_reply = false;
    *ran = 0;
    ferry_message_has_reply(request, &has_reply);
    if (fidl_dec_init(&d, request)) {{ fidl_dec_free(&d); return fidl_fault(request, 2, d.err); }}
    ferry_message *r = fidl_dispatch(ops, ctx, request, &d, has_reply, ran);
    fidl_dec_free(&d);
    return r;
}}

static int fidl_is_oneway(uint32_t op) {{
    switch (op) {{
{oneway_cases}    default: return 0;
    }}
}}

ferry_status {p}_serve_port(const {p}_server_ops *ops, void *ctx, ferry_receive_right *rx, int64_t timeout_ms) {{
    for (;;) {{
        ferry_message *m;
        ferry_status st = ferry_receive_right_recv(rx, timeout_ms, &m);
        if (st == FERRY_ERR_NO_SENDERS) return FERRY_OK;
        if (st == FERRY_ERR_BAD_MESSAGE) continue; /* dropped whole by the library */
        if (st == FERRY_ERR_SEND_ONCE_DROPPED) continue; /* a right this program made went unused; no request is lost */
        if (st != FERRY_OK) return st;
        bool has_reply = false;
        uint32_t op = 0;
        ferry_message_has_reply(m, &has_reply);
        ferry_message_op(m, &op);
        if (op & FERRY_IDL_ANSWER) {{
            /* An answer sent on to this server: never a request, never answered. */
            fidl_drop_answer({upper}_NAME, op);
            ferry_message_free(m);
            continue;
        }}
        if (!has_reply && !fidl_is_oneway(op)) {{
            /* A call nobody could learn the outcome of is not run. */
            ferry_message_free(m);
            continue;
        }}
        int ran;
        ferry_message *r = {p}_dispatch(ops, ctx, m, &ran);
        if (r != NULL && has_reply)
            ferry_message_reply(m, r, 0); /* a client gone or not reading loses its reply only */
        ferry_message_free(r);
        ferry_message_free(m);
    }}
}}

ferry_status {p}_serve_rpc(const {p}_server_ops *ops, void *ctx, ferry_rpc_server *server, int64_t timeout_ms) {{
    ferry_message *reply = NULL;
    for (;;) {{
        ferry_message *m = NULL;
        ferry_status st = ferry_rpc_server_reply_and_wait(server, reply, timeout_ms, &m);
        ferry_message_free(reply);
        reply = NULL;
        if (st == FERRY_ERR_NO_CLIENTS) return FERRY_OK;
        if (st == FERRY_ERR_BAD_MESSAGE) continue;
        if (st != FERRY_OK) return st;
        int ran;
        uint32_t op = 0;
        ferry_message_op(m, &op);
        if (op & FERRY_IDL_ANSWER)
            /* Every call on a connection is answered, to the connection's
             * maker, as whom it acts: an answer there is refused. */
            reply = fidl_fault(m, FERRY_IDL_FAULT_BAD_REQUEST, "the operation id is an answer's, not a request's");
        else
            reply = {p}_dispatch(ops, ctx, m, &ran);
        if (reply == NULL) fidl_new_reply(m, FERRY_IDL_REPLY_OK, &reply); /* a one-way call is acknowledged */
        ferry_message_free(m);
    }}
}}"#,
        oneway_cases = ops
            .iter()
            .filter(|o| o.get("kind").and_then(Value::as_str) == Some("oneway"))
            .filter_map(|o| o.get("ordinal").and_then(Value::as_u64))
            .map(|o| format!("    case {o}u: return 1;\n"))
            .collect::<String>(),
    );
    Ok(CStubs { header_name: format!("{p}.h"), header: h, source_name: format!("{p}.c"), source: c })
}
