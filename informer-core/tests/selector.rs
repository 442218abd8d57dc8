//! Label selectors: the Kubernetes grammar (valid and invalid inputs with error positions),
//! matching against a brute-force evaluator, and `Indexer::select` with and without label
//! indices against a brute-force filter.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::*;
use informer_core::cache::indexer::{IndexValues, index_fn, label_index_name};
use informer_core::object::selector::{Expected, KeyProblem, Operator, Token, ValueProblem};
use informer_core::{
    cache::indexer::IndexError, cache::indexer::Indexer, object::DynamicObject, object::Key,
    object::Object, object::StringMap, object::selector::Labels, object::selector::Selector,
    object::selector::SelectorError,
};
use proptest::prelude::*;

fn parse(s: &str) -> Selector {
    Selector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn labels(pairs: &[(&str, &str)]) -> StringMap {
    pairs.iter().copied().collect()
}

/// Valid inputs (apimachinery's own test cases among them) and their canonical form.
#[test]
fn valid_selectors_parse_to_their_canonical_form() {
    let long_prefix = format!("{}.io/x", "a".repeat(250));
    let long_name = format!("k={}", "v".repeat(63));
    let cases: &[(&str, &str)] = &[
        ("", ""),
        (" \t\r\n", ""),
        ("x=a,y=b,z=c", "x=a,y=b,z=c"),
        ("x!=a,y=b", "x!=a,y=b"),
        ("x=", "x="),
        ("x= ", "x="),
        ("x=,z= ", "x=,z="),
        ("x= ,z= ", "x=,z="),
        ("!x", "!x"),
        ("! x", "!x"),
        ("x>1", "x>1"),
        ("x>1,z<5", "x>1,z<5"),
        ("x>007", "x>007"),
        ("\rx", "x"),
        ("a , b", "a,b"),
        ("x = a   ,   y", "x=a,y"),
        ("x==a", "x==a"),
        ("notin=in", "notin=in"),
        ("in in (in)", "in in (in)"),
        ("!in", "!in"),
        (
            "this-is-a-dns.domain.com/key-with-dash",
            "this-is-a-dns.domain.com/key-with-dash",
        ),
        (
            "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            "this-is-another-dns.domain.com/key-with-dash in (so,what)",
        ),
        (
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            "0.1.2.domain/99 notin (10.10.100.1,tick.tack.clock)",
        ),
        ("foo  in\t (abc)", "foo in (abc)"),
        ("x notin\n (abc)", "x notin (abc)"),
        ("x  notin\t\t(abc,def)", "x notin (abc,def)"),
        ("x in(abc)", "x in (abc)"),
        ("x in (abc,)", "x in (,abc)"),
        ("x in ()", "x in ()"),
        ("x notin ( )", "x notin ()"),
        ("x notin (, a)", "x notin (,a)"),
        ("x in (,)", "x in ()"),
        ("x in (a,,b)", "x in (,a,b)"),
        (
            "x notin (abc,,def),bar,z in (),w",
            "bar,w,x notin (,abc,def),z in ()",
        ),
        ("a in (x,y,notin, z,in)", "a in (in,notin,x,y,z)"),
        ("x in (b,a,b)", "x in (a,b)"),
        ("x=a,a=x", "a=x,x=a"),
        ("x=a,x!=b", "x=a,x!=b"),
        ("x!=b,x=a", "x!=b,x=a"),
        ("A_b.c-D=V_a.l-1", "A_b.c-D=V_a.l-1"),
        ("app.kubernetes.io/name=web", "app.kubernetes.io/name=web"),
        (&long_prefix, &long_prefix),
        (&long_name, &long_name),
    ];
    for (input, canonical) in cases {
        let sel = parse(input);
        assert_eq!(sel.to_string(), *canonical, "{input:?}");
        assert_eq!(
            parse(canonical),
            sel,
            "{input:?}: the canonical form parses back"
        );
        assert_eq!(sel.is_empty(), canonical.is_empty());
        assert_eq!(String::from(&sel), *canonical);
    }
}

/// Invalid inputs, each with the byte position of the token at fault and the typed reason.
#[test]
fn invalid_selectors_fail_with_typed_errors_at_the_right_position() {
    use SelectorError as E;
    let unexpected = |position, found: Token, expected| E::Unexpected {
        position,
        found,
        expected,
    };
    let id = |s: &str| Token::Identifier(s.into());
    let key = |position, problem| E::InvalidKey { position, problem };
    let value = |position, problem| E::InvalidValue { position, problem };
    let long_prefix = format!("{}.io/x", "a".repeat(251));
    let cases: Vec<(String, SelectorError)> = vec![
        // apimachinery's bad strings.
        ("x=a||y=b".into(), value(2, ValueProblem::InvalidCharacters)),
        (
            "x==a==b".into(),
            unexpected(4, Token::DoubleEquals, Expected::CommaOrEnd),
        ),
        (
            "!x=a".into(),
            unexpected(2, Token::Equals, Expected::CommaOrEnd),
        ),
        ("x<a".into(), E::NotAnInteger { position: 2 }),
        (
            "x,,y".into(),
            unexpected(2, Token::Comma, Expected::Requirement),
        ),
        (
            ",x,y".into(),
            unexpected(0, Token::Comma, Expected::Requirement),
        ),
        (
            "x nott in (y)".into(),
            unexpected(2, id("nott"), Expected::Operator),
        ),
        (
            "a in (xyz),".into(),
            unexpected(11, Token::End, Expected::Requirement),
        ),
        (
            "a in (xyz)b notin ()".into(),
            unexpected(10, id("b"), Expected::CommaOrEnd),
        ),
        (
            "a in (xyz abc)".into(),
            unexpected(10, id("abc"), Expected::CommaOrCloseParen),
        ),
        (
            "a notin(".into(),
            unexpected(8, Token::End, Expected::ListItem),
        ),
        (
            "a (".into(),
            unexpected(2, Token::OpenParen, Expected::Operator),
        ),
        (
            "(".into(),
            unexpected(0, Token::OpenParen, Expected::Requirement),
        ),
        // More syntax.
        ("x>".into(), E::NotAnInteger { position: 2 }),
        (
            "x>99999999999999999999".into(),
            E::NotAnInteger { position: 2 },
        ),
        ("x<-1".into(), value(2, ValueProblem::InvalidCharacters)),
        ("a in b".into(), unexpected(5, id("b"), Expected::OpenParen)),
        (
            "a in".into(),
            unexpected(4, Token::End, Expected::OpenParen),
        ),
        (
            "a notin".into(),
            unexpected(7, Token::End, Expected::OpenParen),
        ),
        (
            "x in (a".into(),
            unexpected(7, Token::End, Expected::CommaOrCloseParen),
        ),
        (
            "a in (x,=)".into(),
            unexpected(8, Token::Equals, Expected::ListItem),
        ),
        (
            "x=(a)".into(),
            unexpected(2, Token::OpenParen, Expected::Value),
        ),
        ("!".into(), unexpected(1, Token::End, Expected::Key)),
        ("! ,a".into(), unexpected(2, Token::Comma, Expected::Key)),
        (
            "!=a".into(),
            unexpected(0, Token::NotEquals, Expected::Requirement),
        ),
        ("a=b c".into(), unexpected(4, id("c"), Expected::CommaOrEnd)),
        (
            "a=b,".into(),
            unexpected(4, Token::End, Expected::Requirement),
        ),
        ("a b".into(), unexpected(2, id("b"), Expected::Operator)),
        (
            "a>1>2".into(),
            unexpected(3, Token::GreaterThan, Expected::CommaOrEnd),
        ),
        (
            "a in (x)(y)".into(),
            unexpected(8, Token::OpenParen, Expected::CommaOrEnd),
        ),
        // Keys.
        ("-a=b".into(), key(0, KeyProblem::InvalidName)),
        ("a-=b".into(), key(0, KeyProblem::InvalidName)),
        ("  é=x".into(), key(2, KeyProblem::InvalidName)),
        ("x,a/b/c".into(), key(2, KeyProblem::TooManySlashes)),
        ("/a".into(), key(0, KeyProblem::EmptyPrefix)),
        ("a=1, b.io/".into(), key(5, KeyProblem::EmptyName)),
        ("Example.com/a".into(), key(0, KeyProblem::InvalidPrefix)),
        ("a..b/a".into(), key(0, KeyProblem::InvalidPrefix)),
        ("a-.b/a".into(), key(0, KeyProblem::InvalidPrefix)),
        ("a_b/a".into(), key(0, KeyProblem::InvalidPrefix)),
        ("!a$".into(), key(1, KeyProblem::InvalidName)),
        (
            format!("{}=v", "k".repeat(64)),
            key(0, KeyProblem::NameTooLong),
        ),
        (long_prefix, key(0, KeyProblem::PrefixTooLong)),
        // Values.
        (
            format!("k={}", "v".repeat(64)),
            value(2, ValueProblem::TooLong),
        ),
        (
            "a in (ok, -bad)".into(),
            value(10, ValueProblem::InvalidCharacters),
        ),
        ("a!=b/c".into(), value(3, ValueProblem::InvalidCharacters)),
        ("a=b_".into(), value(2, ValueProblem::InvalidCharacters)),
    ];
    for (input, want) in cases {
        let got = Selector::parse(&input).expect_err(&input);
        assert_eq!(got, want, "{input:?}");
        assert_eq!(got.position(), want.position());
        assert!(got.position() <= input.len());
        assert!(
            got.to_string().starts_with(&format!(
                "invalid label selector at byte {}: ",
                want.position()
            )),
            "{got}"
        );
    }
}

#[test]
fn matching_follows_kubernetes_semantics() {
    /// A selector, labels, and whether it matches them.
    type Case = (&'static str, &'static [(&'static str, &'static str)], bool);
    let cases: &[Case] = &[
        ("", &[("x", "y")], true),
        ("", &[], true),
        ("x=y", &[("x", "y")], true),
        ("x=y,z=w", &[("x", "y"), ("z", "w")], true),
        ("x!=y,z!=w", &[("x", "z"), ("z", "a")], true),
        ("notin=in", &[("notin", "in")], true),
        ("x", &[("x", "z")], true),
        ("x", &[("x", "")], true),
        ("!x", &[("y", "z")], true),
        ("x>1", &[("x", "2")], true),
        ("x<1", &[("x", "0")], true),
        ("x<1", &[("x", "-5")], true),
        ("x=z", &[], false),
        ("x=y", &[("x", "z")], false),
        ("x=y,z=w", &[("x", "w"), ("z", "w")], false),
        ("x!=y,z!=w", &[("x", "z"), ("z", "w")], false),
        ("x", &[("y", "z")], false),
        ("!x", &[("x", "z")], false),
        ("x>1", &[("x", "0")], false),
        ("x>1", &[("x", "1")], false),
        ("x<1", &[("x", "2")], false),
        ("x>1", &[("x", "v2")], false),
        ("x>1", &[], false),
        ("x<1", &[], false),
        (
            "x in (foo),y notin (alpha)",
            &[("x", "foo"), ("y", "baz")],
            true,
        ),
        (
            "x in (foo),y in (alpha)",
            &[("x", "foo"), ("y", "baz")],
            false,
        ),
        ("x notin (),y", &[("y", "")], true),
        ("x notin (),!y", &[("y", "")], false),
        ("x in ()", &[("y", "baz")], false),
        ("x in ()", &[("x", "")], true),
        ("x=", &[("x", "")], true),
        ("x=", &[("x", "a")], false),
        ("x!=", &[], true),
        ("x in (a,b,c)", &[("x", "b")], true),
        ("x notin (a,b,c)", &[("x", "b")], false),
        ("x notin (a,b,c)", &[("x", "d")], true),
        ("x=a,x=b", &[("x", "a")], false),
        (
            "foo=bar,foobar=bar,baz=blah",
            &[("foo", "bar"), ("baz", "blah")],
            false,
        ),
    ];
    for (sel, ls, want) in cases {
        let sel = parse(sel);
        assert_eq!(sel.matches(&labels(ls)), *want, "{sel} on {ls:?}");
        let map: BTreeMap<String, String> = labels(ls).into();
        assert_eq!(sel.matches(&map), *want, "{sel} on a BTreeMap");
        let obj = obj_labels("ns", "o", 1, ls);
        assert_eq!(sel.matches(&obj), *want, "{sel} on an Arc<DynamicObject>");
        assert_eq!(sel.matches(&obj.metadata), *want, "{sel} on ObjectMeta");
    }
}

#[test]
fn accessors_and_helpers() {
    let sel = parse("tier in (web),env==prod,!canary,n>3");
    let ops: Vec<_> = sel
        .requirements()
        .iter()
        .map(|r| (r.key(), r.operator(), r.values().collect::<Vec<_>>()))
        .collect();
    assert_eq!(
        ops,
        [
            ("canary", Operator::DoesNotExist, vec![]),
            ("env", Operator::DoubleEquals, vec!["prod"]),
            ("n", Operator::GreaterThan, vec!["3"]),
            ("tier", Operator::In, vec!["web"]),
        ]
    );
    assert_eq!(sel.requires_exact_match("tier"), Some("web"));
    assert_eq!(sel.requires_exact_match("env"), Some("prod"));
    assert_eq!(sel.requires_exact_match("canary"), None);
    assert_eq!(sel.requires_exact_match("n"), None);
    assert_eq!(parse("a in (x,y)").requires_exact_match("a"), None);
    assert!(Selector::everything().is_empty());
    assert!(Selector::everything().matches(&labels(&[])));

    let from = Selector::from_labels([("b", "2"), ("a", "1")]).unwrap();
    assert_eq!(from.to_string(), "a=1,b=2");
    assert_eq!(
        Selector::from_labels([("a b", "1")]),
        Err(SelectorError::InvalidKey {
            position: 0,
            problem: KeyProblem::InvalidName
        })
    );
    assert_eq!(
        Selector::from_labels([("a", "1 2")]),
        Err(SelectorError::InvalidValue {
            position: 0,
            problem: ValueProblem::InvalidCharacters
        })
    );
    let err = "app in (a b)".parse::<Selector>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid label selector at byte 10: found \"b\", expected ',' or ')'"
    );
}

// ---- Property tests against a brute-force evaluator. ----

const KEYS: &[&str] = &["a", "b", "c", "k8s.io/d"];
/// Values a selector may hold (all valid label values).
const SEL_VALUES: &[&str] = &["", "x", "y", "1", "2", "10"];
/// Values a label map may hold (not all valid, as objects from elsewhere might carry).
const LABEL_VALUES: &[&str] = &["", "x", "y", "1", "2", "10", "-3", "007", "z z"];
const BOUNDS: &[&str] = &["0", "1", "2", "10", "007"];

#[derive(Clone, Debug)]
enum Op {
    Eq,
    DoubleEq,
    NotEq,
    In,
    NotIn,
    Exists,
    NotExists,
    Gt,
    Lt,
}

#[derive(Clone, Debug)]
struct Req {
    key: &'static str,
    op: Op,
    values: Vec<&'static str>,
}

/// The meaning of a requirement, written out independently of the library.
fn brute(reqs: &[Req], ls: &BTreeMap<String, String>) -> bool {
    reqs.iter().all(|r| {
        let v = ls.get(r.key).map(String::as_str);
        let int = |s: &str| s.parse::<i64>().ok();
        match r.op {
            Op::Eq | Op::DoubleEq | Op::In => v.is_some_and(|v| r.values.contains(&v)),
            Op::NotEq | Op::NotIn => v.is_none_or(|v| !r.values.contains(&v)),
            Op::Exists => v.is_some(),
            Op::NotExists => v.is_none(),
            Op::Gt => v
                .and_then(int)
                .is_some_and(|n| n > int(r.values[0]).unwrap()),
            Op::Lt => v
                .and_then(int)
                .is_some_and(|n| n < int(r.values[0]).unwrap()),
        }
    })
}

fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["", "", " ", "\t", "\n ", "  "][..])
}

fn req() -> impl Strategy<Value = Req> {
    let key = prop::sample::select(KEYS);
    let value = prop::sample::select(SEL_VALUES);
    let bound = prop::sample::select(BOUNDS);
    prop_oneof![
        (key.clone(), value.clone()).prop_map(|(key, v)| Req {
            key,
            op: Op::Eq,
            values: vec![v]
        }),
        (key.clone(), value.clone()).prop_map(|(key, v)| Req {
            key,
            op: Op::DoubleEq,
            values: vec![v]
        }),
        (key.clone(), value.clone()).prop_map(|(key, v)| Req {
            key,
            op: Op::NotEq,
            values: vec![v]
        }),
        (key.clone(), prop::collection::vec(value.clone(), 1..4)).prop_map(|(key, values)| Req {
            key,
            op: Op::In,
            values
        }),
        (key.clone(), prop::collection::vec(value, 1..4)).prop_map(|(key, values)| Req {
            key,
            op: Op::NotIn,
            values
        }),
        key.clone().prop_map(|key| Req {
            key,
            op: Op::Exists,
            values: vec![]
        }),
        key.clone().prop_map(|key| Req {
            key,
            op: Op::NotExists,
            values: vec![]
        }),
        (key.clone(), bound.clone()).prop_map(|(key, v)| Req {
            key,
            op: Op::Gt,
            values: vec![v]
        }),
        (key, bound).prop_map(|(key, v)| Req {
            key,
            op: Op::Lt,
            values: vec![v]
        }),
    ]
}

/// A selector as a user might write it: requirements with random whitespace around tokens.
fn written() -> impl Strategy<Value = (Vec<Req>, String)> {
    prop::collection::vec((req(), ws(), ws(), ws()), 0..5).prop_map(|reqs| {
        let text: Vec<String> = reqs
            .iter()
            .map(|(r, w1, w2, w3)| {
                let body = match r.op {
                    Op::Exists => r.key.to_string(),
                    Op::NotExists => format!("!{w2}{}", r.key),
                    Op::Eq => format!("{}{w2}={w3}{}", r.key, r.values[0]),
                    Op::DoubleEq => format!("{}{w2}=={w3}{}", r.key, r.values[0]),
                    Op::NotEq => format!("{}{w2}!={w3}{}", r.key, r.values[0]),
                    Op::Gt => format!("{}{w2}>{w3}{}", r.key, r.values[0]),
                    Op::Lt => format!("{}{w2}<{w3}{}", r.key, r.values[0]),
                    Op::In | Op::NotIn => {
                        let word = if matches!(r.op, Op::In) {
                            "in"
                        } else {
                            "notin"
                        };
                        let sep = format!("{w3},{w2}");
                        format!("{} {w2}{word}{w3}({w2}{}{w3})", r.key, r.values.join(&sep))
                    }
                };
                format!("{w1}{body}{w3}")
            })
            .collect();
        (reqs.into_iter().map(|(r, ..)| r).collect(), text.join(","))
    })
}

fn label_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop::sample::select(KEYS).prop_map(String::from),
        prop::sample::select(LABEL_VALUES).prop_map(String::from),
        0..4,
    )
}

/// Fragments that make up mostly-broken selectors.
const FRAGMENTS: &[&str] = &[
    "a", "b", "x.io/", "/", "=", "==", "!=", "!", "(", ")", ",", " ", "\t", "in", "notin", ">",
    "<", "1", "-", "_", ".", "é", "A",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Whatever the spacing, a written selector parses, matches exactly when the brute-force
    /// evaluation says so, and its canonical form parses back to the same selector.
    #[test]
    fn matches_equals_brute_force((reqs, text) in written(), maps in prop::collection::vec(label_map(), 1..6)) {
        let sel = Selector::parse(&text).map_err(|e| TestCaseError::fail(format!("{text:?}: {e}")))?;
        prop_assert_eq!(sel.requirements().len(), reqs.len());
        for ls in &maps {
            prop_assert_eq!(sel.matches(ls), brute(&reqs, ls), "{:?} on {:?}", text, ls);
        }
        let canonical = sel.to_string();
        let again = Selector::parse(&canonical).map_err(|e| TestCaseError::fail(format!("{canonical:?}: {e}")))?;
        prop_assert_eq!(&again, &sel);
        prop_assert_eq!(again.to_string(), canonical);
    }

    /// Arbitrary junk never panics; an error points inside the input; whatever parses
    /// round-trips through its canonical form.
    #[test]
    fn junk_is_rejected_or_round_trips(parts in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..12)) {
        let input: String = parts.concat();
        match Selector::parse(&input) {
            Ok(sel) => {
                let canonical = sel.to_string();
                let again = Selector::parse(&canonical);
                prop_assert_eq!(again.as_ref(), Ok(&sel), "{:?}", input);
            }
            Err(e) => {
                prop_assert!(e.position() <= input.len());
                prop_assert!(input.is_char_boundary(e.position()));
            }
        }
    }
}

// ---- Indexer::select ----

const NAMESPACES: &[&str] = &["", "ns1", "ns2"];

#[derive(Clone, Debug)]
enum StoreOp {
    Add(&'static str, u8, BTreeMap<String, String>),
    Delete(&'static str, u8),
    Replace(Vec<(&'static str, u8, BTreeMap<String, String>)>),
}

fn store_op() -> impl Strategy<Value = StoreOp> {
    let ns = prop::sample::select(NAMESPACES);
    let name = 0u8..8;
    prop_oneof![
        8 => (ns.clone(), name.clone(), label_map()).prop_map(|(n, i, l)| StoreOp::Add(n, i, l)),
        2 => (ns.clone(), name.clone()).prop_map(|(n, i)| StoreOp::Delete(n, i)),
        1 => prop::collection::vec((ns, name, label_map()), 0..10).prop_map(StoreOp::Replace),
    ]
}

fn make(ns: &str, i: u8, ls: &BTreeMap<String, String>) -> Arc<DynamicObject> {
    let pairs: Vec<(&str, &str)> = ls.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    obj_labels(ns, &format!("o{i}"), 1, &pairs)
}

fn key_set<'a>(it: impl Iterator<Item = &'a Arc<DynamicObject>>) -> (usize, BTreeSet<String>) {
    let keys: Vec<String> = it.map(|o| Key::of(&**o).to_string()).collect();
    (keys.len(), keys.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// After any sequence of adds, deletes and relists, `select` gives exactly the objects a
    /// brute-force filter gives, each once, with label indices on some keys and without any.
    #[test]
    fn select_equals_brute_force(
        ops in prop::collection::vec(store_op(), 0..30),
        queries in prop::collection::vec(((written()), prop::sample::select(&[None, Some(""), Some("ns1"), Some("ns2"), Some("none")][..])), 1..8),
    ) {
        let mut plain: Indexer<DynamicObject> = Indexer::new();
        let mut indexed: Indexer<DynamicObject> = Indexer::new();
        indexed.add_label_index("a").unwrap();
        indexed.add_label_index("k8s.io/d").unwrap();
        let mut model: BTreeMap<String, Arc<DynamicObject>> = BTreeMap::new();
        for op in ops {
            match op {
                StoreOp::Add(ns, i, ls) => {
                    let o = make(ns, i, &ls);
                    model.insert(Key::of(&*o).to_string(), o.clone());
                    plain.add(o.clone());
                    indexed.add(o);
                }
                StoreOp::Delete(ns, i) => {
                    let o = make(ns, i, &BTreeMap::new());
                    model.remove(Key::of(&*o).as_str());
                    plain.delete(&o);
                    indexed.delete(&o);
                }
                StoreOp::Replace(list) => {
                    let objs: Vec<_> = list.iter().map(|(n, i, l)| make(n, *i, l)).collect();
                    model = objs.iter().map(|o| (Key::of(&**o).to_string(), o.clone())).collect();
                    plain.replace(objs.clone());
                    indexed.replace(objs);
                }
            }
        }
        for ((_, text), ns) in queries {
            let sel = parse(&text);
            let want: BTreeSet<String> = model
                .iter()
                .filter(|(_, o)| ns.is_none_or(|ns| ns.is_empty() || o.namespace() == Some(ns)))
                .filter(|(_, o)| sel.matches(&***o))
                .map(|(k, _)| k.clone())
                .collect();
            let (n, got) = key_set(plain.select(&sel, ns));
            prop_assert!(!plain.select(&sel, ns).uses_label_index());
            prop_assert_eq!(n, got.len(), "no duplicates");
            prop_assert_eq!(&got, &want, "{} in {:?} without label index", text, ns);
            let (n, got) = key_set(indexed.select(&sel, ns));
            prop_assert_eq!(n, got.len(), "no duplicates");
            prop_assert_eq!(&got, &want, "{} in {:?} with label index", text, ns);
        }
    }
}

#[test]
fn select_uses_a_label_index_only_when_declared() {
    let mut store: Indexer<DynamicObject> = Indexer::new();
    for i in 0..20 {
        let app = if i % 4 == 0 { "web" } else { "db" };
        store.add(obj_labels("ns1", &format!("o{i}"), 1, &[("app", app)]));
    }
    // A user index under the very name `add_label_index` would use, with some other function:
    // the optimizer must not take it for a label index.
    let upper = index_fn(|o: &DynamicObject| -> IndexValues<'_> {
        o.label("app")
            .map(|v| v.to_uppercase())
            .into_iter()
            .collect()
    });
    store.add_index(&label_index_name("app"), upper).unwrap();
    let sel = parse("app=web");
    assert!(!store.select(&sel, None).uses_label_index());
    assert_eq!(store.select(&sel, None).count(), 5);
    assert_eq!(
        store.add_label_index("app"),
        Err(IndexError::IndexExists {
            name: "label:app".into()
        })
    );

    let mut store: Indexer<DynamicObject> = Indexer::new();
    for i in 0..20 {
        let app = if i % 4 == 0 { "web" } else { "db" };
        store.add(obj_labels("ns1", &format!("o{i}"), 1, &[("app", app)]));
    }
    // Added after the objects: they are indexed at once.
    store.add_label_index("app").unwrap();
    assert!(store.index_names().any(|n| n == "label:app"));
    assert_eq!(store.index_len("label:app", "web"), Ok(5));
    for (text, uses) in [
        ("app=web", true),
        ("app==web", true),
        ("app in (web,nope)", true),
        ("app=web,tier", true),
        ("app!=web", false),
        ("app notin (db)", false),
        ("app", false),
        ("tier=x", false),
        ("", false),
    ] {
        let sel = parse(text);
        assert_eq!(store.select(&sel, None).uses_label_index(), uses, "{text}");
    }
    assert_eq!(store.select(&parse("app in (web,nope)"), None).count(), 5);
    assert_eq!(store.select(&parse("app=web"), Some("ns1")).count(), 5);
    assert_eq!(store.select(&parse("app=web"), Some("ns2")).count(), 0);
    // The namespace's bucket is smaller than the label's: scanned instead (same answer).
    store.add(obj_labels("tiny", "t", 1, &[("app", "db")]));
    let sel = parse("app=db");
    assert!(!store.select(&sel, Some("tiny")).uses_label_index());
    assert_eq!(store.select(&sel, Some("tiny")).count(), 1);
    assert!(store.select(&sel, Some("ns1")).uses_label_index());
    assert_eq!(store.select(&sel, Some("ns1")).count(), 15);
    assert_eq!(store.select(&sel, None).count(), 16);
}

/// `Labels` is all a type needs for selectors; here a typed object with its own label map.
#[test]
fn labels_trait_on_a_custom_type() {
    struct Pod(Vec<(&'static str, &'static str)>);
    impl Labels for Pod {
        fn label(&self, key: &str) -> Option<&str> {
            self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
        }
    }
    let pod = Pod(vec![("app", "web"), ("tier", "front")]);
    assert!(parse("app=web,tier in (front,back)").matches(&pod));
    assert!(!parse("app=web,!tier").matches(&pod));
}

/// An indexer whose namespace index was removed still answers `select` in a namespace (it
/// checks each candidate's namespace), with and without a label index, and `by_index` on the
/// removed index is an error.
#[test]
fn select_in_a_namespace_without_the_namespace_index() {
    let mut store = Indexer::new();
    store.add_label_index("app").unwrap();
    for (ns, name, app) in [("a", "x", "web"), ("a", "y", "db"), ("b", "z", "web")] {
        store.add(obj_labels(ns, name, 1, &[("app", app)]));
    }
    store
        .remove_index(informer_core::cache::indexer::NAMESPACE_INDEX)
        .unwrap();
    assert!(matches!(
        store.by_index(informer_core::cache::indexer::NAMESPACE_INDEX, "a"),
        Err(IndexError::UnknownIndex { .. })
    ));
    fn names(store: &Indexer<DynamicObject>, sel: &str, ns: Option<&str>) -> BTreeSet<String> {
        store
            .select(&parse(sel), ns)
            .map(|o| Key::of(&**o).to_string())
            .collect()
    }
    let set = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(names(&store, "app=web", Some("a")), set(&["a/x"]));
    assert_eq!(names(&store, "", Some("a")), set(&["a/x", "a/y"]));
    assert_eq!(names(&store, "app", None).len(), 3);
    store.remove_index(&label_index_name("app")).unwrap();
    assert_eq!(names(&store, "app=web", Some("b")), set(&["b/z"]));
}
