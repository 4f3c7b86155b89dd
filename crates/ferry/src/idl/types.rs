//! ferry's own kinds as typed values: send and send-once rights to ports
//! that serve a known interface, receive rights, and regions with the
//! transfer mode the interface declares.
//!
//! Each travels as a message item; the decoder checks the item's kind (and
//! a region's mode) before the value exists, so a `ByValue` an
//! implementation receives is always sealed memory nobody can change.

use std::fmt;
use std::marker::PhantomData;

use crate::region::Mode;
use crate::{Item, ReceiveRight, RegionItem, SendOnceRight, SendRight};
use serde_json::{json, Value};

use crate::idl::codec::{DecodeError, Decoder, Encoder, Wire};
use crate::idl::Interface;

/// A send right to a port that serves interface `I`.
pub struct SendTo<I: Interface> {
    right: SendRight,
    _i: PhantomData<fn() -> I>,
}

/// A send-once right to a port that serves interface `I` (one message,
/// typically the answer to a request).
pub struct SendOnceTo<I: Interface> {
    right: SendOnceRight,
    _i: PhantomData<fn() -> I>,
}

/// The receive right of a port whose senders expect interface `I`.
pub struct ReceiveOf<I: Interface> {
    right: ReceiveRight,
    _i: PhantomData<fn() -> I>,
}

macro_rules! typed_right {
    ($ty:ident, $right:ident, $variant:ident, $kind:literal) => {
        impl<I: Interface> $ty<I> {
            /// Declares that the port behind `right` speaks interface `I`
            /// (the peer checks it at connect; see `docs/interfaces.md`).
            pub fn new(right: $right) -> Self {
                $ty { right, _i: PhantomData }
            }
            /// The untyped right.
            pub fn into_inner(self) -> $right {
                self.right
            }
            /// The untyped right, borrowed.
            pub fn right(&self) -> &$right {
                &self.right
            }
        }

        impl<I: Interface> fmt::Debug for $ty<I> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($ty)).field("interface", &I::NAME).field("right", &self.right).finish()
            }
        }

        impl<I: Interface> Wire for $ty<I> {
            fn encode(self, enc: &mut Encoder) {
                enc.put_item(Item::$variant(self.right));
            }
            fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
                match dec.item()? {
                    (_, Item::$variant(r)) => Ok($ty::new(r)),
                    (index, _) => Err(DecodeError::WrongItemKind { index, expected: $kind }),
                }
            }
            fn schema() -> Value {
                json!({ $kind: I::NAME })
            }
            fn min_size() -> usize {
                4
            }
        }

        impl Wire for $right {
            fn encode(self, enc: &mut Encoder) {
                enc.put_item(Item::$variant(self));
            }
            fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
                match dec.item()? {
                    (_, Item::$variant(r)) => Ok(r),
                    (index, _) => Err(DecodeError::WrongItemKind { index, expected: $kind }),
                }
            }
            fn schema() -> Value {
                json!({ $kind: null })
            }
            fn min_size() -> usize {
                4
            }
        }
    };
}

typed_right!(SendTo, SendRight, Send, "send_right");
typed_right!(SendOnceTo, SendOnceRight, SendOnce, "send_once_right");
typed_right!(ReceiveOf, ReceiveRight, Receive, "receive_right");

/// A region sent by value ([`Mode::Copy`] or [`Mode::Move`]): sealed memory
/// the sender can no longer change. Make one with
/// [`Region::by_copy`](crate::Region::by_copy),
/// [`Region::by_move`](crate::Region::by_move) or
/// [`RegionItem::copied_from`].
#[derive(Debug)]
pub struct ByValue(pub RegionItem);

/// A region lent from the sender's pool ([`Mode::Lend`]): read-only for the
/// receiver, back in the pool when the receiver drops it.
#[derive(Debug)]
pub struct Lent(pub RegionItem);

/// Explicitly shared mutable memory ([`Mode::Share`]).
#[derive(Debug)]
pub struct Shared(pub RegionItem);

macro_rules! typed_region {
    ($ty:ident, $name:literal, $ok:expr) => {
        impl $ty {
            /// The region item.
            pub fn into_inner(self) -> RegionItem {
                self.0
            }
        }

        impl Wire for $ty {
            fn encode(self, enc: &mut Encoder) {
                enc.put_item(Item::Region(self.0));
            }
            fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
                match dec.item()? {
                    (index, Item::Region(r)) => {
                        let ok: fn(Mode) -> bool = $ok;
                        if ok(r.mode()) {
                            Ok($ty(r))
                        } else {
                            Err(DecodeError::WrongRegionMode { index, expected: $name, got: r.mode() })
                        }
                    }
                    (index, _) => Err(DecodeError::WrongItemKind { index, expected: "region" }),
                }
            }
            fn schema() -> Value {
                json!({ "region": $name })
            }
            fn min_size() -> usize {
                4
            }
        }
    };
}

typed_region!(ByValue, "by_value", |m| matches!(m, Mode::Copy | Mode::Move));
typed_region!(Lent, "lend", |m| m == Mode::Lend);
typed_region!(Shared, "share", |m| m == Mode::Share);

impl Wire for RegionItem {
    fn encode(self, enc: &mut Encoder) {
        enc.put_item(Item::Region(self));
    }
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, DecodeError> {
        match dec.item()? {
            (_, Item::Region(r)) => Ok(r),
            (index, _) => Err(DecodeError::WrongItemKind { index, expected: "region" }),
        }
    }
    fn schema() -> Value {
        json!({ "region": "any" })
    }
    fn min_size() -> usize {
        4
    }
}
