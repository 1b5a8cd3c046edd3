//! How a counter is declared: once, with its doc comment (which is also its help text), how it
//! adds up over workers, its Prometheus family and labels, and its `/pxgw/stats` name. The
//! `group!` macro turns such a list into the struct the pipeline
//! increments (`report.drops.oversize += 1`) and the [`Group`] description every output reads:
//! merging the workers' reports, the JSON, Prometheus, `/pxgw/stats` and the counter table of
//! `docs/operations.md` all walk the same list, so a counter added there shows everywhere.

use super::SizeHistogram;

/// How a counter adds up over workers, and the Prometheus type it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows: summed over workers; a Prometheus counter (`…_total`), per worker.
    Counter,
    /// A level now (items held, a table's occupancy): summed over workers; a Prometheus gauge,
    /// per worker.
    Gauge,
    /// The largest value seen: the largest over workers; a Prometheus gauge, per worker.
    Max,
    /// A frame-size distribution ([`SizeHistogram`]): summed bucket by bucket; a Prometheus
    /// histogram over all workers.
    Sizes,
    /// A ratio or mean derived from the counts ([`Report::finish`](super::Report::finish)); a
    /// Prometheus gauge, per worker.
    Ratio,
    /// A ratio derived from the counts, shown over all workers only; a Prometheus gauge without
    /// a `worker` label.
    TotalRatio,
}

impl Kind {
    /// The word the counter table of `docs/operations.md` uses for it.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Max => "maximum",
            Kind::Sizes => "histogram",
            Kind::Ratio | Kind::TotalRatio => "ratio",
        }
    }
}

/// Where a Prometheus label's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabelValue {
    /// This text.
    Fixed(&'static str),
    /// The counter's field name (`pxgw_drops_total{reason="oversize"}`).
    Field,
    /// The port the group's direction starts at ([`Member::ends`]).
    From,
    /// The port it ends at.
    To,
}

/// A counter's Prometheus family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prom {
    /// The family's name with its unit, without `_total` (`pxgw_received_bytes`).
    pub name: &'static str,
    /// Labels besides `worker`.
    pub labels: &'static [(&'static str, LabelValue)],
    /// The family's help when several counters share it (else the counter's own).
    pub help: Option<&'static str>,
}

/// One declared counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    /// Its field, and its key in the JSON.
    pub field: &'static str,
    /// Its doc comment as written (each line starts with a space).
    pub doc: &'static str,
    /// How it adds up and what Prometheus makes of it.
    pub kind: Kind,
    /// Its Prometheus family, if it has one.
    pub prom: Option<Prom>,
    /// Its name in `/pxgw/stats`, if it is there; `{}` stands for the group's key.
    pub telemetry: Option<&'static str>,
}

impl Desc {
    /// The doc comment as one line: the help text.
    pub fn help(&self) -> String {
        self.doc.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// A counter's value.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// A count, level or maximum.
    Count(u64),
    /// A derived ratio or mean.
    Ratio(f64),
    /// A frame-size distribution.
    Sizes(&'a SizeHistogram),
}

/// A counter, to change.
#[derive(Debug)]
pub enum ValueMut<'a> {
    /// A count, level or maximum.
    Count(&'a mut u64),
    /// A derived ratio or mean.
    Ratio(&'a mut f64),
    /// A frame-size distribution.
    Sizes(&'a mut SizeHistogram),
}

impl<'a> From<&'a u64> for Value<'a> {
    fn from(v: &'a u64) -> Self {
        Value::Count(*v)
    }
}
impl<'a> From<&'a f64> for Value<'a> {
    fn from(v: &'a f64) -> Self {
        Value::Ratio(*v)
    }
}
impl<'a> From<&'a SizeHistogram> for Value<'a> {
    fn from(v: &'a SizeHistogram) -> Self {
        Value::Sizes(v)
    }
}
impl<'a> From<&'a mut u64> for ValueMut<'a> {
    fn from(v: &'a mut u64) -> Self {
        ValueMut::Count(v)
    }
}
impl<'a> From<&'a mut f64> for ValueMut<'a> {
    fn from(v: &'a mut f64) -> Self {
        ValueMut::Ratio(v)
    }
}
impl<'a> From<&'a mut SizeHistogram> for ValueMut<'a> {
    fn from(v: &'a mut SizeHistogram) -> Self {
        ValueMut::Sizes(v)
    }
}

/// Adds another worker's value of one counter to `a`, as its kind says; derived values are left
/// to [`Report::finish`](super::Report::finish).
pub fn merge(kind: Kind, a: ValueMut<'_>, b: Value<'_>) {
    match (a, b) {
        (ValueMut::Count(a), Value::Count(b)) if kind == Kind::Max => *a = (*a).max(b),
        (ValueMut::Count(a), Value::Count(b)) => *a += b,
        (ValueMut::Sizes(a), Value::Sizes(b)) => a.add(b),
        _ => {}
    }
}

/// A group of counters declared with the `group!` macro.
pub trait Group: Copy + Default + serde::Serialize {
    /// Its counters, in declaration order.
    const FIELDS: &'static [Desc];
    /// Calls `f` with each counter and its value, in declaration order.
    fn visit(&self, f: &mut dyn FnMut(&'static Desc, Value<'_>));
    /// Calls `f` with each counter, to change, in declaration order.
    fn visit_mut(&mut self, f: &mut dyn FnMut(&'static Desc, ValueMut<'_>));
    /// Adds another worker's counters ([`merge`]).
    fn add(&mut self, o: &Self);
}

/// Where a group sits in the [`Report`](super::Report): its key in the JSON, and for a group
/// that is a direction (or a port), the ports it runs from and to, which label its samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its field in the report and its key in the JSON; empty for a counter of the report's own.
    pub key: &'static str,
    /// The ports this group's direction starts and ends at.
    pub ends: Option<(&'static str, &'static str)>,
}

impl Member {
    /// A counter's path: `inbound.packets_in`, or `connections` for one of the report's own.
    pub fn path(&self, d: &Desc) -> String {
        if self.key.is_empty() {
            d.field.to_owned()
        } else {
            format!("{}.{}", self.key, d.field)
        }
    }

    /// A counter's Prometheus labels (besides `worker`), resolved for this member.
    pub fn labels(&self, d: &Desc) -> Vec<(&'static str, String)> {
        let Some(p) = &d.prom else {
            return Vec::new();
        };
        p.labels
            .iter()
            .map(|&(k, v)| {
                let v = match v {
                    LabelValue::Fixed(s) => s,
                    LabelValue::Field => d.field,
                    LabelValue::From => self.ends.map_or("", |e| e.0),
                    LabelValue::To => self.ends.map_or("", |e| e.1),
                };
                (k, v.to_owned())
            })
            .collect()
    }

    /// A counter's `/pxgw/stats` name, resolved for this member.
    pub fn telemetry(&self, d: &Desc) -> Option<String> {
        d.telemetry.map(|t| t.replace("{}", self.key))
    }
}

/// The Rust type of a counter of this kind.
macro_rules! __counter_type {
    (counter) => {
        u64
    };
    (gauge) => {
        u64
    };
    (max) => {
        u64
    };
    (sizes) => {
        $crate::stats::SizeHistogram
    };
    (ratio) => {
        f64
    };
    (total_ratio) => {
        f64
    };
}
pub(crate) use __counter_type;

/// The [`Kind`] of a counter of this kind.
macro_rules! __counter_kind {
    (counter) => {
        $crate::stats::counters::Kind::Counter
    };
    (gauge) => {
        $crate::stats::counters::Kind::Gauge
    };
    (max) => {
        $crate::stats::counters::Kind::Max
    };
    (sizes) => {
        $crate::stats::counters::Kind::Sizes
    };
    (ratio) => {
        $crate::stats::counters::Kind::Ratio
    };
    (total_ratio) => {
        $crate::stats::counters::Kind::TotalRatio
    };
}
pub(crate) use __counter_kind;

/// A Prometheus label's value: `field`, `from`, `to` or a literal.
macro_rules! __label_value {
    (field) => {
        $crate::stats::counters::LabelValue::Field
    };
    (from) => {
        $crate::stats::counters::LabelValue::From
    };
    (to) => {
        $crate::stats::counters::LabelValue::To
    };
    ($v:literal) => {
        $crate::stats::counters::LabelValue::Fixed($v)
    };
}
pub(crate) use __label_value;

/// A counter's [`Desc`].
macro_rules! __counter_desc {
    (
        $field:ident [$($doc:literal)*] $kind:ident
        $(=> $pname:literal $({ $($lk:ident : $lv:tt),* $(,)? })? $(help $phelp:literal)?)?
        $(, tm $tm:literal)?
    ) => {
        $crate::stats::counters::Desc {
            field: stringify!($field),
            doc: concat!($($doc),*),
            kind: $crate::stats::counters::__counter_kind!($kind),
            prom: $crate::stats::counters::__counter_prom!($($pname $({ $($lk : $lv),* })? $(help $phelp)?)?),
            telemetry: $crate::stats::counters::__optional!($($tm)?),
        }
    };
}
pub(crate) use __counter_desc;

/// A counter's [`Prom`], if it has one.
macro_rules! __counter_prom {
    () => { None };
    ($pname:literal $({ $($lk:ident : $lv:tt),* })? $(help $phelp:literal)?) => {
        Some($crate::stats::counters::Prom {
            name: $pname,
            labels: &[$($((stringify!($lk), $crate::stats::counters::__label_value!($lv)),)*)?],
            help: $crate::stats::counters::__optional!($($phelp)?),
        })
    };
}
pub(crate) use __counter_prom;

/// `Some(x)` or `None`.
macro_rules! __optional {
    () => {
        None
    };
    ($v:expr) => {
        Some($v)
    };
}
pub(crate) use __optional;

/// Declares a group of counters: the struct (every field public, its doc comment its help) and
/// its [`Group`] description. Each counter is
///
/// ```text
/// /// What it counts (the help text).
/// field: kind [=> "prometheus_family" [{ label: value, ... }] [help "family help"]] [, tm "telemetry_name"];
/// ```
///
/// with `kind` one of `counter`, `gauge`, `max`, `sizes`, `ratio`, `total_ratio` ([`Kind`]); a
/// label value is a literal, `field` (the field's name), `from` or `to` (the group's ports,
/// [`Member::ends`]); `{}` in a telemetry name stands for the group's key.
macro_rules! group {
    (
        $(#[doc = $gdoc:literal])*
        $(#[derive($($derive:ident),*)])?
        pub struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident : $kind:ident
                $(=> $pname:literal $({ $($lk:ident : $lv:tt),* $(,)? })? $(help $phelp:literal)?)?
                $(, tm $tm:literal)?
                ;
            )*
        }
    ) => {
        $(#[doc = $gdoc])*
        #[derive(Clone, Copy, Debug, Default, serde::Serialize, PartialEq $($(, $derive)*)?)]
        pub struct $name {
            $(
                $(#[doc = $doc])*
                pub $field: $crate::stats::counters::__counter_type!($kind),
            )*
        }

        impl $crate::stats::counters::Group for $name {
            const FIELDS: &'static [$crate::stats::counters::Desc] = &[
                $(
                    $crate::stats::counters::__counter_desc!(
                        $field [$($doc)*] $kind
                        $(=> $pname $({ $($lk : $lv),* })? $(help $phelp)?)?
                        $(, tm $tm)?
                    ),
                )*
            ];

            fn visit(
                &self,
                f: &mut dyn FnMut(&'static $crate::stats::counters::Desc, $crate::stats::counters::Value<'_>),
            ) {
                let mut d = Self::FIELDS.iter();
                $(
                    if let Some(desc) = d.next() {
                        f(desc, (&self.$field).into());
                    }
                )*
            }

            fn visit_mut(
                &mut self,
                f: &mut dyn FnMut(&'static $crate::stats::counters::Desc, $crate::stats::counters::ValueMut<'_>),
            ) {
                let mut d = Self::FIELDS.iter();
                $(
                    if let Some(desc) = d.next() {
                        f(desc, (&mut self.$field).into());
                    }
                )*
            }

            fn add(&mut self, o: &Self) {
                let mut d = Self::FIELDS.iter();
                $(
                    if let Some(desc) = d.next() {
                        $crate::stats::counters::merge(desc.kind, (&mut self.$field).into(), (&o.$field).into());
                    }
                )*
            }
        }
    };
}
pub(crate) use group;
