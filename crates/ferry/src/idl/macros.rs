//! The definition macros: [`interface!`](crate::interface),
//! [`record!`](crate::record) and [`enumeration!`](crate::enumeration), and
//! the hidden helpers they expand through. Everything they generate is plain
//! Rust over the [`Wire`](crate::idl::Wire) trait; `docs/interfaces.md` shows
//! what a definition turns into.

/// Defines a struct that travels as a record: each field has an ordinal,
/// fields may be added later (as `Option<T>`, so older writers that do not
/// send them still decode) and unknown fields from newer writers are
/// skipped.
///
/// Field attributes are limited to doc comments (they go into the
/// description); the struct takes any attributes.
///
/// ```
/// ferry::record! {
///     /// A point.
///     #[derive(Debug, PartialEq)]
///     pub struct Point {
///         /// Across.
///         1 => pub x: i32,
///         /// Down.
///         2 => pub y: i32,
///         /// Added in version 2.
///         3 => pub label: Option<String>,
///     }
/// }
/// ```
#[macro_export]
macro_rules! record {
    (
        $(#[$m:meta])*
        $vis:vis struct $name:ident {
            $( $(#[doc = $fdoc:literal])* $ord:literal => $fvis:vis $f:ident : $t:ty ),* $(,)?
        }
    ) => {
        $(#[$m])*
        $vis struct $name {
            $( $(#[doc = $fdoc])* $fvis $f: $t, )*
        }

        const _: () = assert!(
            $crate::idl::codec::ordinals_ok(&[$($ord as u32),*]),
            concat!("record ", stringify!($name), ": field ordinals must be distinct and non-zero")
        );

        impl $crate::idl::Wire for $name {
            fn encode(self, enc: &mut $crate::idl::Encoder) {
                enc.record(|enc| {
                    $( enc.field($ord, self.$f); )*
                });
            }

            fn decode(dec: &mut $crate::idl::Decoder<'_>) -> ::core::result::Result<Self, $crate::idl::DecodeError> {
                dec.record(|dec| {
                    $( let mut $f: ::core::option::Option<$t> = None; )*
                    while let Some((ord, len)) = dec.next_field()? {
                        $(
                            if ord == $ord {
                                $crate::idl::codec::field_value(dec, &mut $f, len, stringify!($name), $ord)?;
                                continue;
                            }
                        )*
                        dec.skip(len)?;
                    }
                    Ok($name {
                        $( $f: $crate::idl::codec::field_or_absent($f, stringify!($name), $ord)?, )*
                    })
                })
            }

            fn schema() -> $crate::idl::__json::Value {
                $crate::idl::__json::json!({
                    "record": stringify!($name),
                    "fields": [ $( {
                        "name": stringify!($f),
                        "ordinal": $ord,
                        "type": (<$t as $crate::idl::Wire>::schema()),
                        "doc": ($crate::idl::codec::doc_text(&[$($fdoc),*]))
                    } ),* ]
                })
            }

            fn min_size() -> usize {
                4
            }
        }
    };
}

/// Defines an enumeration that travels as a `u32` tag (the variant's
/// ordinal) and, for a variant that carries one, its payload. Unit and
/// one-payload variants are allowed; a tag the reader does not know is a
/// [`DecodeError::UnknownVariant`](crate::idl::DecodeError::UnknownVariant).
///
/// ```
/// ferry::enumeration! {
///     /// Why it failed.
///     #[derive(Debug, PartialEq)]
///     pub enum StoreError {
///         /// No such key.
///         1 => NotFound,
///         /// The value is larger than the store takes (its limit).
///         2 => TooLarge(u64),
///     }
/// }
/// ```
#[macro_export]
macro_rules! enumeration {
    (
        $(#[$m:meta])*
        $vis:vis enum $name:ident {
            $( $(#[doc = $vdoc:literal])* $ord:literal => $v:ident $(($pt:ty))? ),* $(,)?
        }
    ) => {
        $(#[$m])*
        $vis enum $name {
            $( $(#[doc = $vdoc])* $v $(($pt))?, )*
        }

        const _: () = assert!(
            $crate::idl::codec::ordinals_ok(&[$($ord as u32),*]),
            concat!("enumeration ", stringify!($name), ": variant ordinals must be distinct and non-zero")
        );

        impl $crate::idl::Wire for $name {
            fn encode(self, enc: &mut $crate::idl::Encoder) {
                let this = self;
                $(
                    #[allow(unreachable_patterns)]
                    let this = $crate::__idl_enum_encode!(this, enc, $name, $ord, $v $(, $pt)?);
                )*
                let _ = this;
                unreachable!("every variant is encoded above")
            }

            fn decode(dec: &mut $crate::idl::Decoder<'_>) -> ::core::result::Result<Self, $crate::idl::DecodeError> {
                let tag = dec.u32()?;
                $(
                    if tag == $ord {
                        return Ok($crate::__idl_enum_decode!(dec, $name, $v $(, $pt)?));
                    }
                )*
                Err($crate::idl::DecodeError::UnknownVariant { ty: stringify!($name), tag })
            }

            fn schema() -> $crate::idl::__json::Value {
                $crate::idl::__json::json!({
                    "enum": stringify!($name),
                    "variants": [ $( {
                        "name": stringify!($v),
                        "ordinal": $ord,
                        "payload": ($crate::__idl_payload_schema!($($pt)?)),
                        "doc": ($crate::idl::codec::doc_text(&[$($vdoc),*]))
                    } ),* ]
                })
            }

            fn min_size() -> usize {
                4
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_enum_encode {
    ($this:ident, $enc:ident, $name:ident, $ord:literal, $v:ident) => {
        match $this {
            $name::$v => {
                $enc.put_u32($ord);
                return;
            }
            other => other,
        }
    };
    ($this:ident, $enc:ident, $name:ident, $ord:literal, $v:ident, $pt:ty) => {
        match $this {
            $name::$v(p) => {
                $enc.put_u32($ord);
                $crate::idl::Wire::encode(p, $enc);
                return;
            }
            other => other,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_enum_decode {
    ($dec:ident, $name:ident, $v:ident) => {
        $name::$v
    };
    ($dec:ident, $name:ident, $v:ident, $pt:ty) => {
        $name::$v(<$pt as $crate::idl::Wire>::decode($dec)?)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_payload_schema {
    () => {
        $crate::idl::__json::Value::Null
    };
    ($pt:ty) => {
        <$pt as $crate::idl::Wire>::schema()
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_ty_or {
    ([] $d:ty) => { $d };
    ([$t:ty] $d:ty) => { $t };
}

/// Defines a typed interface: a module holding the client proxy
/// (`Client`), the trait an implementation provides (`Service`), its
/// dispatcher (`Server`), the operations' ordinals (`ops`) and the marker
/// type (`Protocol`) that implements [`Interface`](crate::idl::Interface) and
/// describes the interface in JSON.
///
/// Each operation is `fn name(args) -> Result | Error = ordinal;` (a call;
/// the result defaults to `()`, the error part is optional) or
/// `oneway name(args) = ordinal;` (no reply through a port). Arguments are
/// a record whose field ordinals are their positions: append new ones, as
/// `Option<T>`, never reorder. Operations take only doc comments, which
/// become the documentation of the generated methods and of the
/// description.
///
/// ```
/// ferry::interface! {
///     /// Counts things.
///     pub mod counter: "example.counter", version 1, compatible 1 {
///         /// Adds `n`; returns the new total.
///         fn add(n: u64) -> u64 = 1;
///         /// Forgets everything.
///         oneway reset() = 2;
///     }
/// }
/// struct Total(u64);
/// impl counter::Service for Total {
///     fn add(&mut self, _: &ferry::idl::Context, n: u64) -> u64 { self.0 += n; self.0 }
///     fn reset(&mut self, _: &ferry::idl::Context) { self.0 = 0; }
/// }
/// # let _ = counter::Server(Total(0));
/// ```
#[macro_export]
macro_rules! interface {
    (
        $(#[doc = $doc:literal])*
        $vis:vis mod $module:ident : $name:literal, version $version:literal, compatible $compat:literal {
            $(
                $(#[doc = $odoc:literal])*
                $kind:ident $op:ident ( $($arg:ident : $aty:ty),* $(,)? ) $(-> $ret:ty)? $(| $err:ty)? = $ord:literal;
            )*
        }
    ) => {
        $(#[doc = $doc])*
        #[allow(unused_imports)]
        $vis mod $module {
            use super::*;

            #[doc = concat!("Stands for the `", $name, "` interface in typed rights (`SendTo<Protocol>`) and carries its description.")]
            #[derive(Debug, Clone, Copy)]
            pub enum Protocol {}

            const _: () = assert!(
                $crate::idl::codec::ordinals_ok(&[$($ord),*]),
                "operation ordinals must be distinct and non-zero (0 is the version check)"
            );
            const _: () = assert!($compat <= $version, "compatible must not be newer than version");
            const _: () = assert!(
                $crate::idl::codec::below_answers(&[$($ord),*]),
                "operation ordinals must be below 2^31 (ids with bit 31 set are answers)"
            );

            impl $crate::idl::Interface for Protocol {
                const NAME: &'static str = $name;
                const VERSION: u32 = $version;
                const COMPATIBLE: u32 = $compat;
                fn describe() -> $crate::idl::__json::Value {
                    $crate::idl::__json::json!({
                        "interface": $name,
                        "version": $version,
                        "compatible": $compat,
                        "doc": ($crate::idl::codec::doc_text(&[$($doc),*])),
                        "operations": [ $( {
                            "name": stringify!($op),
                            "ordinal": $ord,
                            "kind": ($crate::__idl_kind_name!($kind)),
                            "doc": ($crate::idl::codec::doc_text(&[$($odoc),*])),
                            "args": ({
                                #[allow(unused_mut)]
                                let mut args: ::std::vec::Vec<$crate::idl::__json::Value> = ::std::vec::Vec::new();
                                $(
                                    args.push($crate::idl::__json::json!({
                                        "name": stringify!($arg),
                                        "ordinal": args.len() + 1,
                                        "type": (<$aty as $crate::idl::Wire>::schema())
                                    }));
                                )*
                                args
                            }),
                            "result": (<$crate::__idl_ty_or!([$($ret)?] ()) as $crate::idl::Wire>::schema()),
                            "error": (<$crate::__idl_ty_or!([$($err)?] $crate::idl::NoError) as $crate::idl::Wire>::schema())
                        } ),* ]
                    })
                }
            }

            /// This interface's description (see [`Protocol`]).
            pub fn describe() -> $crate::idl::__json::Value {
                <Protocol as $crate::idl::Interface>::describe()
            }

            /// The operations' ordinals (their operation ids on the wire).
            #[allow(non_upper_case_globals)]
            pub mod ops {
                $(
                    #[doc = concat!("Ordinal of `", stringify!($op), "`.")]
                    pub const $op: u32 = $ord;
                )*
            }

            #[doc = concat!("What a server of `", $name, "` implements; serve it with [`Server`]. Each method runs only after its request was checked whole.")]
            #[allow(clippy::too_many_arguments)]
            pub trait Service {
                $(
                    $crate::__idl_service_fn! { [$($odoc)*] $kind $op ($($arg : $aty),*) [$($ret)?] [$($err)?] }
                )*
            }

            #[doc = concat!("A typed proxy for `", $name, "` over a channel (a port, or an RPC connection).")]
            #[derive(Debug)]
            pub struct Client<C: $crate::idl::Channel = $crate::idl::PortChannel> {
                chan: C,
                peer_version: u32,
                /// The buffers every call reuses.
                bufs: $crate::idl::CallBuffers,
            }

            #[allow(clippy::too_many_arguments)]
            impl<C: $crate::idl::Channel> Client<C> {
                /// Checks the server's interface and version over `chan`
                /// and returns the proxy.
                ///
                /// # Errors
                /// [`IdlError::WrongInterface`]($crate::idl::IdlError::WrongInterface),
                /// [`IdlError::Incompatible`]($crate::idl::IdlError::Incompatible), a
                /// [`Fault::Incompatible`]($crate::idl::Fault::Incompatible) from a
                /// server that finds this client too old, or the channel's error.
                pub fn connect(mut chan: C) -> ::core::result::Result<Self, $crate::idl::IdlError> {
                    let peer_version = $crate::idl::hello::<Protocol>(&mut chan)?;
                    Ok(Client { chan, peer_version, bufs: ::core::default::Default::default() })
                }

                /// The proxy over a channel whose version check the caller
                /// made itself ([`hello_request`]($crate::idl::hello_request)
                /// and [`hello_check`]($crate::idl::hello_check)), for a
                /// transport that must read the server's first answer
                /// itself (a server that can refuse the connection with the
                /// interface's own error); the server answered
                /// `peer_version`.
                pub fn after_hello(chan: C, peer_version: u32) -> Self {
                    Client { chan, peer_version, bufs: ::core::default::Default::default() }
                }

                /// The server's version, learnt at connect.
                pub fn peer_version(&self) -> u32 {
                    self.peer_version
                }

                /// The channel.
                pub fn channel_mut(&mut self) -> &mut C {
                    &mut self.chan
                }

                /// Gives the channel back.
                pub fn into_channel(self) -> C {
                    self.chan
                }

                $(
                    $crate::__idl_client_fn! { [$($odoc)*] $kind $op ($($arg : $aty),*) [$($ret)?] [$($err)?] $ord }
                )*
            }

            #[doc = concat!("An async typed proxy for `", $name, "` over an async channel (with the `tokio` feature of `ferry`: `AsyncPortChannel` or `AsyncRpcChannel`). Its methods are those of [`Client`], awaited.")]
            #[derive(Debug)]
            pub struct AsyncClient<C: $crate::idl::AsyncChannel> {
                chan: C,
                peer_version: u32,
            }

            #[allow(clippy::too_many_arguments)]
            impl<C: $crate::idl::AsyncChannel> AsyncClient<C> {
                /// Checks the server's interface and version over `chan`
                /// and returns the proxy.
                ///
                /// # Errors
                /// As [`Client::connect`].
                pub async fn connect(mut chan: C) -> ::core::result::Result<Self, $crate::idl::IdlError> {
                    let reply = $crate::idl::AsyncChannel::call(&mut chan, $crate::idl::hello_request::<Protocol>()).await?;
                    let peer_version = $crate::idl::hello_check::<Protocol>(reply)?;
                    Ok(AsyncClient { chan, peer_version })
                }

                /// The server's version, learnt at connect.
                pub fn peer_version(&self) -> u32 {
                    self.peer_version
                }

                /// The channel.
                pub fn channel_mut(&mut self) -> &mut C {
                    &mut self.chan
                }

                /// Gives the channel back.
                pub fn into_channel(self) -> C {
                    self.chan
                }

                $(
                    $crate::__idl_async_client_fn! { [$($odoc)*] $kind $op ($($arg : $aty),*) [$($ret)?] [$($err)?] $ord }
                )*
            }

            impl Client<$crate::idl::PortChannel> {
                /// Connects over a send right to the server's port.
                ///
                /// # Errors
                /// As [`Client::connect`].
                pub fn over_port(to: $crate::SendRight) -> ::core::result::Result<Self, $crate::idl::IdlError> {
                    Self::connect($crate::idl::PortChannel::new(to))
                }
            }

            impl Client<$crate::idl::RpcChannel> {
                /// Opens an RPC connection (calls that fit the shared slot
                /// take the fast path) to the server whose port `server`
                /// names.
                ///
                /// # Errors
                /// As [`Client::connect`], and the connection's refusal.
                pub fn over_rpc(server: &$crate::SendRight) -> ::core::result::Result<Self, $crate::idl::IdlError> {
                    Self::connect($crate::idl::RpcChannel::connect(server, ::core::default::Default::default())?)
                }
            }

            #[doc = concat!("Serves an implementation of [`Service`] (through [`", stringify!($crate), "::idl::serve_port`] or [`", stringify!($crate), "::idl::serve_rpc`]): answers the version check, checks each request whole before the implementation runs, answers anything else with a fault.")]
            #[derive(Debug)]
            pub struct Server<S: Service>(pub S);

            impl<S: Service> $crate::idl::Dispatch for Server<S> {
                fn dispatch(&mut self, req: $crate::Message, route: $crate::idl::Route) -> ::core::option::Option<$crate::Message> {
                    let mut enc = $crate::idl::Encoder::new();
                    let answer = self.dispatch_encoded(req, route, &mut enc)?;
                    Some(answer.into_message(enc))
                }

                fn dispatch_encoded(&mut self, mut req: $crate::Message, route: $crate::idl::Route, out: &mut $crate::idl::Encoder) -> ::core::option::Option<$crate::idl::Answer> {
                    let op = req.op();
                    if $crate::idl::is_answer(op) {
                        // An answer sent on to this server: never a request.
                        // Over a port it is dropped unanswered; over an RPC
                        // connection, whose every call is answered on the
                        // connection and acts as its maker, it is refused.
                        return match route {
                            $crate::idl::Route::Rpc => route.fault($crate::idl::Fault::BadRequest(::std::format!("operation id {op:#x} is an answer's, not a request's"))).map($crate::idl::Answer::Message),
                            $crate::idl::Route::Port { .. } => {
                                $crate::idl::drop_answer($name, &req);
                                None
                            }
                        };
                    }
                    if op == $crate::idl::OP_HELLO {
                        return route.can_reply().then(|| $crate::idl::Answer::Message($crate::idl::answer_hello::<Protocol>(req)));
                    }
                    let ctx = $crate::idl::Context { sender: req.sender() };
                    let svc = &mut self.0;
                    $(
                        if op == $ord {
                            return $crate::__idl_serve_op! { svc, req, route, ctx, out, $kind $op ($($arg : $aty),*) [$($ret)?] [$($err)?] };
                        }
                    )*
                    let _ = (svc, ctx, &mut req, out);
                    route.fault($crate::idl::Fault::UnknownOperation(op)).map($crate::idl::Answer::Message)
                }
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_kind_name {
    (fn) => {
        "call"
    };
    (oneway) => {
        "oneway"
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_service_fn {
    ([$($doc:literal)*] fn $op:ident ($($arg:ident : $aty:ty),*) [$($ret:ty)?] []) => {
        $(#[doc = $doc])*
        fn $op(&mut self, ctx: &$crate::idl::Context, $($arg: $aty),*) -> $crate::__idl_ty_or!([$($ret)?] ());
    };
    ([$($doc:literal)*] fn $op:ident ($($arg:ident : $aty:ty),*) [$($ret:ty)?] [$err:ty]) => {
        $(#[doc = $doc])*
        fn $op(&mut self, ctx: &$crate::idl::Context, $($arg: $aty),*) -> ::core::result::Result<$crate::__idl_ty_or!([$($ret)?] ()), $err>;
    };
    ([$($doc:literal)*] oneway $op:ident ($($arg:ident : $aty:ty),*) [] []) => {
        $(#[doc = $doc])*
        fn $op(&mut self, ctx: &$crate::idl::Context, $($arg: $aty),*);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_encode_args {
    ($ord:literal; $($arg:ident),*) => {{
        let hint = 0 $( + 6 + $crate::idl::Wire::size_hint(&$arg) )*;
        let mut enc = $crate::idl::Encoder::with_capacity(hint);
        $crate::__idl_encode_args!(@into &mut enc; $($arg),*);
        enc.into_message($ord)
    }};
    (@into $enc:expr; $($arg:ident),*) => {{
        #[allow(unused_variables)]
        let enc: &mut $crate::idl::Encoder = $enc;
        #[allow(unused_mut, unused_variables)]
        let mut k: u16 = 0;
        $(
            k += 1;
            enc.field(k, $arg);
        )*
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_client_fn {
    ([$($doc:literal)*] fn $op:ident ($($arg:ident : $aty:ty),*) [$($ret:ty)?] [] $ord:literal) => {
        $(#[doc = $doc])*
        ///
        /// # Errors
        /// The call's failure, or the server's refusal of the request.
        pub fn $op(&mut self, $($arg: $aty),*) -> ::core::result::Result<$crate::__idl_ty_or!([$($ret)?] ()), $crate::idl::IdlError> {
            $crate::__idl_encode_args!(@into self.bufs.encoder(); $($arg),*);
            match $crate::idl::call_encoded::<$crate::__idl_ty_or!([$($ret)?] ()), $crate::idl::NoError>(&mut self.chan, &mut self.bufs, $ord)? {
                Ok(v) => Ok(v),
                Err(never) => match never {},
            }
        }
    };
    ([$($doc:literal)*] fn $op:ident ($($arg:ident : $aty:ty),*) [$($ret:ty)?] [$err:ty] $ord:literal) => {
        $(#[doc = $doc])*
        ///
        /// # Errors
        /// [`CallError::App`]($crate::idl::CallError::App) with the operation's
        /// error, or [`CallError::Idl`]($crate::idl::CallError::Idl) when the call
        /// itself failed.
        pub fn $op(&mut self, $($arg: $aty),*) -> ::core::result::Result<$crate::__idl_ty_or!([$($ret)?] ()), $crate::idl::CallError<$err>> {
            $crate::__idl_encode_args!(@into self.bufs.encoder(); $($arg),*);
            $crate::idl::call_encoded::<$crate::__idl_ty_or!([$($ret)?] ()), $err>(&mut self.chan, &mut self.bufs, $ord)?.map_err($crate::idl::CallError::App)
        }
    };
    ([$($doc:literal)*] oneway $op:ident ($($arg:ident : $aty:ty),*) [] [] $ord:literal) => {
        $(#[doc = $doc])*
        ///
        /// One-way: through a port nothing comes back; through an RPC
        /// connection the server acknowledges it once run.
        ///
        /// # Errors
        /// The send's failure (and over RPC the server's refusal).
        pub fn $op(&mut self, $($arg: $aty),*) -> ::core::result::Result<(), $crate::idl::IdlError> {
            let req = $crate::__idl_encode_args!($ord; $($arg),*);
            $crate::idl::Channel::send(&mut self.chan, req)
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_async_client_fn {
    ([$($doc:literal)*] fn $op:ident ($($arg:ident : $aty:ty),*) [$($ret:ty)?] [] $ord:literal) => {
        $(#[doc = $doc])*
        ///
        /// # Errors
        /// The call's failure, or the server's refusal of the request.
        pub async fn $op(&mut self, $($arg: $aty),*) -> ::core::result::Result<$crate::__idl_ty_or!([$($ret)?] ()), $crate::idl::IdlError> {
            let req = $crate::__idl_encode_args!($ord; $($arg),*);
            let reply = $crate::idl::AsyncChannel::call(&mut self.chan, req).await?;
            match $crate::idl::decode_reply::<$crate::__idl_ty_or!([$($ret)?] ()), $crate::idl::NoError>(reply)? {
                Ok(v) => Ok(v),
                Err(never) => match never {},
            }
        }
    };
    ([$($doc:literal)*] fn $op:ident ($($arg:ident : $aty:ty),*) [$($ret:ty)?] [$err:ty] $ord:literal) => {
        $(#[doc = $doc])*
        ///
        /// # Errors
        /// [`CallError::App`]($crate::idl::CallError::App) with the operation's
        /// error, or [`CallError::Idl`]($crate::idl::CallError::Idl) when the call
        /// itself failed.
        pub async fn $op(&mut self, $($arg: $aty),*) -> ::core::result::Result<$crate::__idl_ty_or!([$($ret)?] ()), $crate::idl::CallError<$err>> {
            let req = $crate::__idl_encode_args!($ord; $($arg),*);
            let reply = $crate::idl::AsyncChannel::call(&mut self.chan, req).await?;
            $crate::idl::decode_reply::<$crate::__idl_ty_or!([$($ret)?] ()), $err>(reply)?.map_err($crate::idl::CallError::App)
        }
    };
    ([$($doc:literal)*] oneway $op:ident ($($arg:ident : $aty:ty),*) [] [] $ord:literal) => {
        $(#[doc = $doc])*
        ///
        /// One-way, as the blocking client's.
        ///
        /// # Errors
        /// The send's failure (and over RPC the server's refusal).
        pub async fn $op(&mut self, $($arg: $aty),*) -> ::core::result::Result<(), $crate::idl::IdlError> {
            let req = $crate::__idl_encode_args!($ord; $($arg),*);
            $crate::idl::AsyncChannel::send(&mut self.chan, req).await
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_decode_args {
    ($req:ident, $opname:expr; $($arg:ident : $aty:ty),*) => {{
        let items = $req.take_items();
        let mut dec = $crate::idl::Decoder::new($req.body(), items);
        // A labelled block, not a closure: the decoded arguments stay in
        // this frame instead of travelling back in a returned `Result`.
        'decode: {
            $( let mut $arg: ::core::option::Option<$aty> = None; )*
            #[allow(unused_variables)]
            while let Some((ord, len)) = $crate::__idl_try!('decode, dec.next_field()) {
                #[allow(unused_mut, unused_variables)]
                let mut k: u16 = 0;
                $(
                    k += 1;
                    if ord == k {
                        $crate::__idl_try!('decode, $crate::idl::codec::field_arg(&mut dec, &mut $arg, len, $opname, k));
                        continue;
                    }
                )*
                $crate::__idl_try!('decode, dec.skip(len));
            }
            #[allow(unused_mut, unused_variables)]
            let mut k: u16 = 0;
            $(
                k += 1;
                let $arg = $crate::__idl_try!('decode, $crate::idl::codec::field_or_absent($arg, $opname, k));
            )*
            let claim = dec.take_claim();
            $crate::__idl_try!('decode, dec.finish());
            ::core::result::Result::<_, $crate::idl::DecodeError>::Ok((($($arg,)*), claim))
        }
    }};
}

/// `?` for a labelled block: the value, or the block's result is the error.
#[doc(hidden)]
#[macro_export]
macro_rules! __idl_try {
    ($label:lifetime, $e:expr) => {
        match $e {
            ::core::result::Result::Ok(v) => v,
            ::core::result::Result::Err(e) => break $label ::core::result::Result::Err(e),
        }
    };
}

/// Hands the request's buffer, cut to the claimed bytes, to the byte-list
/// argument that claimed it (see `TailClaim`); the buffer is left empty
/// then, else it keeps the request's bytes (and carries the reply).
#[doc(hidden)]
#[macro_export]
macro_rules! __idl_adopt {
    ($claim:ident, $buf:ident; $($arg:ident),*) => {{
        if let ::core::option::Option::Some(c) = $claim {
            c.cut(&mut $buf);
            #[allow(unused_mut, unused_variables)]
            let mut k: u16 = 0;
            $(
                k += 1;
                $crate::idl::Wire::adopt(&mut $arg, k, &c, &mut $buf);
            )*
        }
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_invoke {
    ([] $call:expr) => {
        ::core::result::Result::<_, $crate::idl::NoError>::Ok($call)
    };
    ([$err:ty] $call:expr) => {
        $call
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idl_serve_op {
    ($svc:ident, $req:ident, $route:ident, $ctx:ident, $out:ident, fn $op:ident ($($arg:ident : $aty:ty),*) [$($ret:ty)?] [$($err:ty)?]) => {{
        if !$route.can_reply() {
            // A call with no one to answer is not run.
            None
        } else {
            $crate::__idl_with_args!($req, $route, $op ($($arg : $aty),*), buf => {
                let outcome = $crate::__idl_invoke!([$($err)?] $svc.$op(&$ctx, $($arg),*));
                // The request's buffer, if no argument took it, carries the
                // reply.
                $out.clear();
                $out.recycle(buf);
                Some($crate::idl::answer_into::<$crate::__idl_ty_or!([$($ret)?] ()), $crate::__idl_ty_or!([$($err)?] $crate::idl::NoError)>($out, outcome))
            })
        }
    }};
    ($svc:ident, $req:ident, $route:ident, $ctx:ident, $out:ident, oneway $op:ident ($($arg:ident : $aty:ty),*) [] []) => {{
        $crate::__idl_with_args!($req, $route, $op ($($arg : $aty),*), buf => {
            drop(buf);
            $svc.$op(&$ctx, $($arg),*);
            match $route {
                $crate::idl::Route::Rpc => {
                    $out.clear();
                    Some($crate::idl::answer_into::<(), $crate::idl::NoError>($out, Ok(())))
                }
                $crate::idl::Route::Port { .. } => None,
            }
        })
    }};
}

/// Decodes operation `$op`'s arguments out of `$req` (a fault answers a
/// request that does not match) and runs `$body` with them and with the
/// request's buffer as `$buf`: handed to a byte-list argument that ends
/// the request (then empty), else still holding the request's bytes.
#[doc(hidden)]
#[macro_export]
macro_rules! __idl_with_args {
    ($req:ident, $route:ident, $op:ident ($($arg:ident : $aty:ty),*), $buf:ident => $body:block) => {
        match $crate::__idl_decode_args!($req, concat!(stringify!($op), " arguments"); $($arg : $aty),*) {
            Err(e) => $route.fault($crate::idl::Fault::BadRequest(e.to_string())).map($crate::idl::Answer::Message),
            #[allow(unused_mut)]
            Ok((($(mut $arg,)*), claim)) => {
                #[allow(unused_mut)]
                let mut $buf = ::core::mem::take($req.body_mut());
                $crate::__idl_adopt!(claim, $buf; $($arg),*);
                $body
            }
        }
    };
}
