//! The metadata every object has beyond its key, typed: labels and annotations
//! ([`MetaMap`]), finalizers ([`Finalizers`]), `deletionTimestamp` ([`Timestamp`]),
//! `generation`, and owner references ([`OwnerReferenceRef`], [`OwnerReference`] to write one,
//! [`controller_of`] to build the one a controller puts on what it creates).
//!
//! [`Object`] reads them for any object: each type answers from where it keeps them (a
//! `K8s<T>` from its typed fields, an [`ObjectMeta`](crate::object::ObjectMeta) from its raw
//! JSON). A value kept as raw JSON is read when asked, and one that is not what Kubernetes
//! gives that field (a `generation` that is not an integer, a `deletionTimestamp` that is not
//! RFC 3339) is a [`MetadataError`], never a panic nor a silent "absent".

use alloc::borrow::Cow;
use alloc::collections::BTreeMap;
use alloc::string::String;
use core::fmt;
use core::marker::PhantomData;
use core::ops::Deref;

use serde::de::{self, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use smallvec::SmallVec;

use crate::object::Object;
use crate::object::raw::RawFieldsRef;
use crate::object::string_map::{Iter as StringMapIter, Str, StringMapRef};
use crate::time::{civil_from_days, days_from_civil};

/// A metadata field that is not what Kubernetes gives it, or an object lacking what an owner
/// reference needs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetadataError {
    /// `metadata.<field>` does not have the type Kubernetes gives it.
    Malformed {
        /// The field's name in `metadata` (`generation`, `finalizers`, ...).
        field: &'static str,
        /// What it should be (`an integer`, `a list of strings`, ...).
        expected: &'static str,
    },
    /// `metadata.<field>` is not an RFC 3339 timestamp Kubernetes could have written.
    BadTimestamp {
        /// The field's name in `metadata`.
        field: &'static str,
        /// What is wrong with it.
        error: TimestampError,
    },
    /// The object lacks a field an owner reference needs ([`controller_of`]): its
    /// `apiVersion`, `kind`, `metadata.name` or `metadata.uid` is absent or empty.
    Missing {
        /// The field (`apiVersion`, `kind`, `name` or `uid`).
        field: &'static str,
    },
}

impl fmt::Display for MetadataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetadataError::Malformed { field, expected } => {
                write!(f, "metadata.{field} is not {expected}")
            }
            MetadataError::BadTimestamp { field, error } => {
                write!(f, "metadata.{field} is not a timestamp: {error}")
            }
            MetadataError::Missing { field } => {
                write!(f, "the object has no {field} for an owner reference")
            }
        }
    }
}

impl core::error::Error for MetadataError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            MetadataError::BadTimestamp { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Why text is not a [`Timestamp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimestampError {
    /// Not of the form `2006-01-02T15:04:05Z` (a fraction of up to nine digits and a
    /// `±hh:mm` offset allowed).
    Syntax,
    /// A field out of its range (month 13, February 30, hour 24, ...), or an instant outside
    /// the years 0000 to 9999.
    OutOfRange,
}

impl fmt::Display for TimestampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimestampError::Syntax => "not RFC 3339 (2006-01-02T15:04:05Z)",
            TimestampError::OutOfRange => "a date or time field out of range",
        })
    }
}

impl core::error::Error for TimestampError {}

/// An instant as Kubernetes writes it (`metav1.Time`: RFC 3339, `2006-01-02T15:04:05Z`),
/// held as seconds and nanoseconds since the Unix epoch, UTC. Prints back as RFC 3339 in UTC
/// (with the fraction only when there is one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    secs: i64,
    nanos: u32,
}

/// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z, in Unix seconds.
const MIN_SECS: i64 = -62_167_219_200;
const MAX_SECS: i64 = 253_402_300_799;

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

impl Timestamp {
    /// The instant `secs` seconds and `nanos` nanoseconds after the Unix epoch. Out of range
    /// when `nanos` is a second or more, or the instant is outside the years 0000 to 9999.
    pub fn from_unix(secs: i64, nanos: u32) -> Result<Timestamp, TimestampError> {
        if nanos >= 1_000_000_000 || !(MIN_SECS..=MAX_SECS).contains(&secs) {
            return Err(TimestampError::OutOfRange);
        }
        Ok(Timestamp { secs, nanos })
    }

    /// Seconds since the Unix epoch (negative before 1970).
    pub fn unix_seconds(&self) -> i64 {
        self.secs
    }

    /// The nanoseconds past [`unix_seconds`](Self::unix_seconds) (below 1,000,000,000).
    pub fn subsec_nanos(&self) -> u32 {
        self.nanos
    }

    /// Parses RFC 3339 as Kubernetes writes it: `2006-01-02T15:04:05Z`, with a fraction of a
    /// second of up to nine digits (`MicroTime`) and a `Z` or `±hh:mm` offset.
    pub fn parse(text: &str) -> Result<Timestamp, TimestampError> {
        use TimestampError::{OutOfRange, Syntax};
        let b = text.as_bytes();
        let num = |range: core::ops::Range<usize>| -> Result<u32, TimestampError> {
            let digits = b.get(range).ok_or(Syntax)?;
            digits.iter().try_fold(0u32, |n, &c| {
                c.is_ascii_digit()
                    .then(|| n * 10 + u32::from(c - b'0'))
                    .ok_or(Syntax)
            })
        };
        let at = |i: usize, allowed: &[u8]| match b.get(i) {
            Some(c) if allowed.contains(c) => Ok(()),
            _ => Err(Syntax),
        };
        let year = num(0..4)?;
        at(4, b"-")?;
        let month = num(5..7)?;
        at(7, b"-")?;
        let day = num(8..10)?;
        at(10, b"Tt")?;
        let hour = num(11..13)?;
        at(13, b":")?;
        let minute = num(14..16)?;
        at(16, b":")?;
        let second = num(17..19)?;
        let mut i = 19;
        let mut nanos = 0u32;
        if b.get(i) == Some(&b'.') {
            let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 || digits > 9 {
                return Err(Syntax);
            }
            nanos = num(i + 1..i + 1 + digits)? * 10u32.pow(9 - digits as u32);
            i += 1 + digits;
        }
        let offset = match b.get(i) {
            Some(b'Z' | b'z') if b.len() == i + 1 => 0,
            Some(&sign @ (b'+' | b'-')) if b.len() == i + 6 => {
                at(i + 3, b":")?;
                let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
                if oh > 23 || om > 59 {
                    return Err(OutOfRange);
                }
                let secs = i64::from(oh * 3600 + om * 60);
                if sign == b'+' { secs } else { -secs }
            }
            _ => return Err(Syntax),
        };
        let y = i64::from(year);
        if !(1..=12).contains(&month)
            || day == 0
            || day > days_in_month(y, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return Err(OutOfRange);
        }
        let secs = days_from_civil(y, month, day) * 86_400
            + i64::from(hour * 3600 + minute * 60 + second)
            - offset;
        Timestamp::from_unix(secs, nanos)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (days, rem) = (self.secs.div_euclid(86_400), self.secs.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
            rem / 3600,
            rem / 60 % 60,
            rem % 60
        )?;
        if self.nanos != 0 {
            let mut frac = self.nanos;
            let mut width = 9;
            while frac % 10 == 0 {
                frac /= 10;
                width -= 1;
            }
            write!(f, ".{frac:0width$}")?;
        }
        f.write_str("Z")
    }
}

impl core::str::FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Timestamp::parse(s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Str(text) = Str::deserialize(d)?;
        Timestamp::parse(&text).map_err(de::Error::custom)
    }
}

/// `metadata.labels` or `metadata.annotations` of any object, borrowed: the same reads
/// whether the object keeps them encoded in its metadata block or as a `BTreeMap`. Entries come
/// sorted by key.
#[derive(Clone, Copy, Default)]
pub struct MetaMap<'a>(MapSource<'a>);

#[derive(Clone, Copy, Default)]
enum MapSource<'a> {
    #[default]
    Empty,
    Encoded(StringMapRef<'a>),
    Tree(&'a BTreeMap<String, String>),
}

impl<'a> MetaMap<'a> {
    /// No entries.
    pub const EMPTY: MetaMap<'static> = MetaMap(MapSource::Empty);

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        match self.0 {
            MapSource::Empty => None,
            MapSource::Encoded(m) => m.get(key),
            MapSource::Tree(m) => m.get(key).map(String::as_str),
        }
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        match self.0 {
            MapSource::Empty => 0,
            MapSource::Encoded(m) => m.len(),
            MapSource::Tree(m) => m.len(),
        }
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entries, sorted by key.
    pub fn iter(&self) -> MetaMapIter<'a> {
        MetaMapIter(match self.0 {
            MapSource::Empty => IterSource::Empty,
            MapSource::Encoded(m) => IterSource::Encoded(m.iter()),
            MapSource::Tree(m) => IterSource::Tree(m.iter()),
        })
    }
}

impl<'a> From<StringMapRef<'a>> for MetaMap<'a> {
    fn from(m: StringMapRef<'a>) -> Self {
        MetaMap(MapSource::Encoded(m))
    }
}

impl<'a> From<&'a BTreeMap<String, String>> for MetaMap<'a> {
    fn from(m: &'a BTreeMap<String, String>) -> Self {
        MetaMap(MapSource::Tree(m))
    }
}

impl<'a> From<Option<&'a BTreeMap<String, String>>> for MetaMap<'a> {
    fn from(m: Option<&'a BTreeMap<String, String>>) -> Self {
        m.map_or(MetaMap(MapSource::Empty), MetaMap::from)
    }
}

impl PartialEq for MetaMap<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for MetaMap<'_> {}

impl fmt::Debug for MetaMap<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for MetaMap<'a> {
    type Item = (&'a str, &'a str);
    type IntoIter = MetaMapIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The entries of a [`MetaMap`], sorted by key.
#[derive(Clone, Debug)]
pub struct MetaMapIter<'a>(IterSource<'a>);

#[derive(Clone, Debug)]
enum IterSource<'a> {
    Empty,
    Encoded(StringMapIter<'a>),
    Tree(alloc::collections::btree_map::Iter<'a, String, String>),
}

impl<'a> Iterator for MetaMapIter<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            IterSource::Empty => None,
            IterSource::Encoded(it) => it.next(),
            IterSource::Tree(it) => it.next().map(|(k, v)| (k.as_str(), v.as_str())),
        }
    }
}

/// `metadata.finalizers` of any object, borrowed where the object allows (up to two kept
/// without allocating).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finalizers<'a>(SmallVec<[Cow<'a, str>; 2]>);

impl<'a> Finalizers<'a> {
    /// Whether `name` is one of them.
    pub fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|f| f == name)
    }
}

impl<'a> Deref for Finalizers<'a> {
    type Target = [Cow<'a, str>];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<'a, S: Into<Cow<'a, str>>> FromIterator<S> for Finalizers<'a> {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        Finalizers(iter.into_iter().map(Into::into).collect())
    }
}

/// One entry of `metadata.ownerReferences`, owned: what a controller writes into the objects
/// it creates (serializes as Kubernetes' `OwnerReference`). [`controller_of`] builds the usual
/// one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    /// The owner's `apiVersion`.
    pub api_version: String,
    /// The owner's `kind`.
    pub kind: String,
    /// The owner's name (same namespace as the owned object, or the owner is cluster-scoped).
    pub name: String,
    /// The owner's uid.
    pub uid: String,
    /// Set on the managing controller's reference (at most one per object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Whether the owner's foreground deletion waits for this object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

impl OwnerReference {
    /// A reference to the object `api_version`, `kind`, `name`, `uid` (neither controller nor
    /// blocking; see [`controller`](Self::controller)).
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        name: impl Into<String>,
        uid: impl Into<String>,
    ) -> Self {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: None,
            block_owner_deletion: None,
        }
    }

    /// This reference marked as the managing controller's, blocking the owner's foreground
    /// deletion (`controller: true`, `blockOwnerDeletion: true`, as client-go's
    /// `NewControllerRef`).
    pub fn controller(mut self) -> Self {
        self.controller = Some(true);
        self.block_owner_deletion = Some(true);
        self
    }

    /// Whether this is the managing controller's reference.
    pub fn is_controller(&self) -> bool {
        self.controller == Some(true)
    }

    /// This reference, borrowed.
    pub fn as_ref(&self) -> OwnerReferenceRef<'_> {
        OwnerReferenceRef {
            api_version: Cow::Borrowed(&self.api_version),
            kind: Cow::Borrowed(&self.kind),
            name: Cow::Borrowed(&self.name),
            uid: Cow::Borrowed(&self.uid),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

/// One entry of `metadata.ownerReferences`, borrowed from the object where it allows: what
/// [`Object::owner_references`] reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReferenceRef<'a> {
    /// The owner's `apiVersion`.
    #[serde(borrow)]
    pub api_version: Cow<'a, str>,
    /// The owner's `kind`.
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
    /// The owner's name.
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    /// The owner's uid.
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    /// Set on the managing controller's reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    /// Whether the owner's foreground deletion waits for this object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

impl OwnerReferenceRef<'_> {
    /// Whether this is the managing controller's reference.
    pub fn is_controller(&self) -> bool {
        self.controller == Some(true)
    }

    /// An owned copy.
    pub fn to_owned(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.as_ref().into(),
            kind: self.kind.as_ref().into(),
            name: self.name.as_ref().into(),
            uid: self.uid.as_ref().into(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

/// `metadata.ownerReferences` of any object (one kept without allocating).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerReferences<'a>(SmallVec<[OwnerReferenceRef<'a>; 1]>);

impl<'a> OwnerReferences<'a> {
    /// The managing controller's reference (`controller: true`), if any.
    pub fn controller(&self) -> Option<&OwnerReferenceRef<'a>> {
        self.0.iter().find(|r| r.is_controller())
    }
}

impl<'a> Deref for OwnerReferences<'a> {
    type Target = [OwnerReferenceRef<'a>];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<'a> FromIterator<OwnerReferenceRef<'a>> for OwnerReferences<'a> {
    fn from_iter<I: IntoIterator<Item = OwnerReferenceRef<'a>>>(iter: I) -> Self {
        OwnerReferences(iter.into_iter().collect())
    }
}

/// The owner reference a controller puts on an object it creates for `owner`: its
/// `apiVersion`, `kind`, name and uid, with `controller: true` and `blockOwnerDeletion: true`
/// (client-go's `metav1.NewControllerRef`). Serialize it into the child's
/// `metadata.ownerReferences`.
///
/// The owner's `apiVersion` and `kind` come from [`Object::api_version`] and [`Object::kind`]:
/// a `K8s<T>` knows them, a [`DynamicObject`](crate::object::DynamicObject) has them from the
/// server. A type that does not (a metadata-only object, a custom type without them) gives
/// [`MetadataError::Missing`]; build the reference with [`OwnerReference::new`] then, or with
/// the resource's `controller_of` in informer-http.
///
/// ```
/// use informer_core::object::{DynamicObject, controller_of};
///
/// let owner: DynamicObject = serde_json::from_str(
///     r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","uid":"u-1"}}"#,
/// )?;
/// let child = serde_json::json!({
///     "metadata": {"name": "web-config", "ownerReferences": [controller_of(&owner)?]},
/// });
/// assert_eq!(
///     child["metadata"]["ownerReferences"][0],
///     serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
///         "uid": "u-1", "controller": true, "blockOwnerDeletion": true}),
/// );
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub fn controller_of<O: Object + ?Sized>(owner: &O) -> Result<OwnerReference, MetadataError> {
    owner_reference_as(
        owner,
        owner.api_version().unwrap_or(""),
        owner.kind().unwrap_or(""),
    )
    .map(OwnerReference::controller)
}

/// A plain reference to `owner` as an object of `api_version` and `kind` (checked non-empty,
/// with the owner's name and uid).
pub fn owner_reference_as<O: Object + ?Sized>(
    owner: &O,
    api_version: &str,
    kind: &str,
) -> Result<OwnerReference, MetadataError> {
    let need = |value: &str, field| {
        if value.is_empty() {
            Err(MetadataError::Missing { field })
        } else {
            Ok(())
        }
    };
    need(api_version, "apiVersion")?;
    need(kind, "kind")?;
    need(owner.name(), "name")?;
    let uid = owner.uid().unwrap_or("");
    need(uid, "uid")?;
    Ok(OwnerReference::new(api_version, kind, owner.name(), uid))
}

/// A JSON array read into a `SmallVec`, its elements borrowing from the text where they can.
struct Seq<A: smallvec::Array>(SmallVec<A>);

impl<'de, A> Deserialize<'de> for Seq<A>
where
    A: smallvec::Array,
    A::Item: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<A>(PhantomData<A>);
        impl<'de, A> Visitor<'de> for V<A>
        where
            A: smallvec::Array,
            A::Item: Deserialize<'de>,
        {
            type Value = Seq<A>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Seq<A>, S::Error> {
                let mut out = SmallVec::new();
                while let Some(item) = seq.next_element()? {
                    out.push(item);
                }
                Ok(Seq(out))
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

/// Other metadata member `field` decoded as `T` (`null` reads as absent), or the error naming
/// the field and what it should be.
fn read<'a, T: Deserialize<'a>>(
    other: RawFieldsRef<'a>,
    field: &'static str,
    expected: &'static str,
) -> Result<Option<T>, MetadataError> {
    match other.get(field) {
        None => Ok(None),
        Some(raw) => serde_json::from_str::<Option<T>>(raw.get())
            .map_err(|_| MetadataError::Malformed { field, expected }),
    }
}

/// `generation` from metadata kept as raw JSON.
pub(crate) fn raw_generation(other: RawFieldsRef<'_>) -> Result<Option<i64>, MetadataError> {
    read(other, "generation", "an integer")
}

/// `deletionTimestamp` from metadata kept as raw JSON.
pub(crate) fn raw_deletion_timestamp(
    other: RawFieldsRef<'_>,
) -> Result<Option<Timestamp>, MetadataError> {
    const FIELD: &str = "deletionTimestamp";
    let Some(Str(text)) = read::<Str<'_>>(other, FIELD, "a string")? else {
        return Ok(None);
    };
    Timestamp::parse(&text)
        .map(Some)
        .map_err(|error| MetadataError::BadTimestamp {
            field: FIELD,
            error,
        })
}

/// `finalizers` from metadata kept as raw JSON.
pub(crate) fn raw_finalizers(other: RawFieldsRef<'_>) -> Result<Finalizers<'_>, MetadataError> {
    let list = read::<Seq<[Str<'_>; 2]>>(other, "finalizers", "a list of strings")?;
    Ok(list.map_or_else(Finalizers::default, |Seq(v)| {
        Finalizers(v.into_iter().map(|Str(s)| s).collect())
    }))
}

/// `ownerReferences` from metadata kept as raw JSON.
pub(crate) fn raw_owner_references(
    other: RawFieldsRef<'_>,
) -> Result<OwnerReferences<'_>, MetadataError> {
    let list = read::<Seq<[OwnerReferenceRef<'_>; 1]>>(
        other,
        "ownerReferences",
        "a list of owner references (apiVersion, kind, name and uid strings)",
    )?;
    Ok(OwnerReferences(list.map(|Seq(v)| v).unwrap_or_default()))
}

#[cfg(test)]
mod tests;
