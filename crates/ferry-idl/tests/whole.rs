//! A reply that is one value decoded whole: a byte-list result takes over
//! the reply's buffer instead of being copied out of it (one allocation and
//! one copy less per call), and anything that is not exactly a byte list is
//! still checked by the decoder, with the same errors as before.

use ferry::Message;
use ferry_idl::{decode_reply, DecodeError, Decoder, Encoder, IdlError, NoError, Wire, REPLY_OK};

fn reply_with(body: Vec<u8>) -> Message {
    Message::new(REPLY_OK).with_body(body)
}

fn encoded(v: Vec<u8>) -> Vec<u8> {
    let mut enc = Encoder::new();
    v.encode(&mut enc);
    enc.into_message(REPLY_OK).body().to_vec()
}

/// What the checking decoder says of `body` as a `Vec<u8>`.
fn checked(body: &[u8], items: Vec<ferry::Item>) -> Result<Vec<u8>, DecodeError> {
    let mut dec = Decoder::new(body, items);
    let v = Vec::<u8>::decode(&mut dec)?;
    dec.finish()?;
    Ok(v)
}

#[test]
fn a_byte_list_reply_keeps_its_buffer() {
    for data in [vec![], vec![7u8; 8], (0..1024u32).map(|i| i as u8).collect::<Vec<u8>>()] {
        let msg = reply_with(encoded(data.clone()));
        let at = msg.body().as_ptr();
        let got = decode_reply::<Vec<u8>, NoError>(msg).unwrap().unwrap();
        assert_eq!(got, data);
        if !data.is_empty() {
            assert_eq!(got.as_ptr(), at, "the reply's buffer was copied, not kept");
        }
    }
}

#[test]
fn a_reply_that_is_not_exactly_a_byte_list_gets_the_decoders_error() {
    let good = encoded(vec![1, 2, 3, 4]);
    let mut long = good.clone();
    long.push(9); // trailing byte
    let mut short = good.clone();
    short.pop(); // count says more than there is
    let cases: Vec<Vec<u8>> = vec![long, short, vec![], vec![1, 0], vec![0xff, 0xff, 0xff, 0xff, 1]];
    for body in cases {
        let want = checked(&body, vec![]).unwrap_err();
        match decode_reply::<Vec<u8>, NoError>(reply_with(body.clone())) {
            Err(IdlError::BadReply(e)) => assert_eq!(e, want, "body {body:?}"),
            other => panic!("body {body:?}: {other:?}"),
        }
    }
    // A well-formed list with an item nobody claims is refused too.
    let (_rx, tx) = ferry::port().unwrap();
    let want = checked(&good, vec![ferry::Item::from(tx.try_clone().unwrap())]).unwrap_err();
    assert_eq!(want, DecodeError::UnclaimedItems(1));
    match decode_reply::<Vec<u8>, NoError>(reply_with(good).with_item(tx)) {
        Err(IdlError::BadReply(e)) => assert_eq!(e, want),
        other => panic!("{other:?}"),
    }
}

#[test]
fn lists_of_other_types_decode_as_before() {
    let v: Vec<u32> = vec![1, 2, 0xdead_beef];
    let mut enc = Encoder::new();
    v.clone().encode(&mut enc);
    let got = decode_reply::<Vec<u32>, NoError>(enc.into_message(REPLY_OK)).unwrap().unwrap();
    assert_eq!(got, v);
    let nested: Vec<Vec<u8>> = vec![vec![1], vec![], vec![2, 3]];
    let mut enc = Encoder::new();
    nested.clone().encode(&mut enc);
    assert_eq!(decode_reply::<Vec<Vec<u8>>, NoError>(enc.into_message(REPLY_OK)).unwrap().unwrap(), nested);
    assert_eq!(vec![1u8; 5].size_hint(), 9);
}

ferry_idl::interface! {
    /// Byte-list arguments in every position.
    pub mod bytes_args: "test.bytes_args", version 1, compatible 1 {
        /// Returns `data`.
        fn echo(data: Vec<u8>) -> Vec<u8> = 1;
        /// Returns both.
        fn pair(a: Vec<u8>, b: Vec<u8>) -> Vec<Vec<u8>> = 2;
        /// Returns `x`.
        fn nested(x: Vec<Vec<u8>>) -> Vec<Vec<u8>> = 3;
        /// Returns `x`.
        fn maybe(x: Option<Vec<u8>>) -> Option<Vec<u8>> = 4;
        /// Returns the key's length and the value.
        fn put(key: String, value: Vec<u8>) -> Vec<u8> = 5;
        /// Keeps `data`.
        oneway keep(data: Vec<u8>) = 6;
    }
}

/// The implementation: hands back what it was given.
#[derive(Default)]
struct Back {
    kept: Vec<Vec<u8>>,
    /// Where `echo`'s argument was.
    echo_at: usize,
}

impl bytes_args::Service for Back {
    fn echo(&mut self, _: &ferry_idl::Context, data: Vec<u8>) -> Vec<u8> {
        self.echo_at = data.as_ptr() as usize;
        data
    }
    fn pair(&mut self, _: &ferry_idl::Context, a: Vec<u8>, b: Vec<u8>) -> Vec<Vec<u8>> {
        vec![a, b]
    }
    fn nested(&mut self, _: &ferry_idl::Context, x: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        x
    }
    fn maybe(&mut self, _: &ferry_idl::Context, x: Option<Vec<u8>>) -> Option<Vec<u8>> {
        x
    }
    fn put(&mut self, _: &ferry_idl::Context, key: String, mut value: Vec<u8>) -> Vec<u8> {
        value.push(key.len() as u8);
        value
    }
    fn keep(&mut self, _: &ferry_idl::Context, data: Vec<u8>) {
        self.kept.push(data);
    }
}

/// A request for operation `op` whose fields `write` puts in, in its order.
fn request(op: u32, write: impl FnOnce(&mut Encoder)) -> Message {
    let mut enc = Encoder::new();
    write(&mut enc);
    enc.into_message(op)
}

fn answer<R: Wire>(srv: &mut bytes_args::Server<Back>, req: Message) -> Result<R, IdlError> {
    use ferry_idl::{Dispatch, Route};
    let reply = srv.dispatch(req, Route::Rpc).expect("a call is answered");
    decode_reply::<R, NoError>(reply).map(|r| r.unwrap_or_else(|e| match e {}))
}

#[test]
fn a_byte_list_argument_that_ends_the_request_takes_its_buffer() {
    let mut srv = bytes_args::Server(Back::default());
    for data in [vec![9u8; 1], vec![7u8; 8], (0..1024u32).map(|i| i as u8).collect::<Vec<u8>>()] {
        let req = request(1, |e| e.field(1, data.clone()));
        let at = req.body().as_ptr();
        use ferry_idl::{Dispatch, Route};
        let reply = srv.dispatch(req, Route::Rpc).unwrap();
        assert_eq!(srv.0.echo_at, at as usize, "the argument is the request's buffer, not a copy");
        assert_eq!(reply.body().as_ptr(), at, "the request's buffer carried the argument and then the reply");
        assert_eq!(decode_reply::<Vec<u8>, NoError>(reply).unwrap().unwrap(), data);
    }
    // Behind another argument, and with the reply grown by the server.
    let v: Vec<u8> = answer(&mut srv, request(5, |e| {
        e.field(1, String::from("key"));
        e.field(2, vec![1u8, 2, 3]);
    }))
    .unwrap();
    assert_eq!(v, [1, 2, 3, 3]);
    // One-way.
    let reply = {
        use ferry_idl::{Dispatch, Route};
        srv.dispatch(request(6, |e| e.field(1, vec![5u8; 100])), Route::Port { reply: false })
    };
    assert!(reply.is_none());
    assert_eq!(srv.0.kept, [vec![5u8; 100]]);
}

#[test]
fn byte_list_arguments_anywhere_else_decode_as_before() {
    let mut srv = bytes_args::Server(Back::default());
    let (a, b) = (vec![1u8, 2, 3], vec![4u8; 40]);
    // In order, in reverse order (the first argument ends the body), and
    // with either one empty.
    let cases: Vec<(Vec<u8>, Vec<u8>, bool)> =
        vec![(a.clone(), b.clone(), false), (a.clone(), b.clone(), true), (vec![], b.clone(), false), (a.clone(), vec![], false), (vec![], b.clone(), true), (a.clone(), vec![], true)];
    for (x, y, reversed) in cases {
        let req = request(2, |e| {
            if reversed {
                e.field(2, y.clone());
                e.field(1, x.clone());
            } else {
                e.field(1, x.clone());
                e.field(2, y.clone());
            }
        });
        let got: Vec<Vec<u8>> = answer(&mut srv, req).unwrap();
        assert_eq!(got, [x.clone(), y.clone()], "reversed: {reversed}");
    }
    // A field this build does not know ends the body: skipped, and the
    // byte list before it is copied out.
    let req = request(1, |e| {
        e.field(1, a.clone());
        e.field(9, vec![0xeeu8; 16]);
    });
    assert_eq!(answer::<Vec<u8>>(&mut srv, req).unwrap(), a);
    // Byte lists inside other values never take the buffer.
    let nested = vec![vec![1u8], vec![], vec![2u8; 30]];
    assert_eq!(answer::<Vec<Vec<u8>>>(&mut srv, request(3, |e| e.field(1, nested.clone()))).unwrap(), nested);
    assert_eq!(answer::<Option<Vec<u8>>>(&mut srv, request(4, |e| e.field(1, Some(b.clone())))).unwrap(), Some(b.clone()));
    assert_eq!(answer::<Option<Vec<u8>>>(&mut srv, request(4, |e| e.field(1, None::<Vec<u8>>))).unwrap(), None);
}

#[test]
fn a_malformed_request_ending_in_bytes_is_refused_whole() {
    use ferry_idl::Fault;
    let mut srv = bytes_args::Server(Back::default());
    let refused = |srv: &mut bytes_args::Server<Back>, req: Message| match answer::<Vec<u8>>(srv, req) {
        Err(IdlError::Fault(Fault::BadRequest(why))) => why,
        other => panic!("{other:?}"),
    };
    // The same argument twice, the second ending the body.
    let why = refused(&mut srv, request(1, |e| {
        e.field(1, vec![1u8; 4]);
        e.field(1, vec![2u8; 4]);
    }));
    assert!(why.contains("appears twice"), "{why}");
    // A count that promises more than the field holds.
    let mut req = request(1, |e| e.field(1, vec![3u8; 8]));
    let n = req.body().len();
    req.body_mut().truncate(n - 1);
    let why = refused(&mut srv, req);
    assert!(!why.is_empty());
    // A count shorter than the field: bytes left inside it.
    let mut req = request(1, |e| e.field(1, vec![3u8; 8]));
    req.body_mut()[6] = 7;
    let why = refused(&mut srv, req);
    assert!(why.contains("left") || why.contains("trailing") || why.contains("Trailing"), "{why}");
    // A missing argument behind one that ends the body.
    let why = refused(&mut srv, request(5, |e| e.field(2, vec![1u8; 4])));
    assert!(why.contains("missing"), "{why}");
    assert!(srv.0.kept.is_empty());
}

/// The bytes a field of `value` encodes to, built by hand: ordinal,
/// length, value.
fn field_bytes(ordinal: u16, value: &[u8]) -> Vec<u8> {
    let mut b = ordinal.to_le_bytes().to_vec();
    b.extend_from_slice(&(value.len() as u32).to_le_bytes());
    b.extend_from_slice(value);
    b
}

fn list_bytes(list: &[u8]) -> Vec<u8> {
    let mut b = (list.len() as u32).to_le_bytes().to_vec();
    b.extend_from_slice(list);
    b
}

/// A byte list written last is kept in its own vector (the encoder's tail)
/// and the two pieces are exactly the bytes of the message; anything
/// written after it brings it into the body, so field and record lengths
/// are those of the flat encoding in every order.
#[test]
fn an_encoder_keeps_a_last_byte_list_apart_and_writes_the_same_bytes() {
    let data = vec![0xabu8; 40];
    let at = data.as_ptr();
    let mut enc = Encoder::new();
    enc.field(1, String::from("k"));
    enc.field(2, data.clone());
    let (body, tail) = enc.parts();
    let want = [field_bytes(1, &list_bytes(b"k")), field_bytes(2, &list_bytes(&data))].concat();
    assert_eq!([body, tail].concat(), want);
    assert_eq!(tail, &data[..], "the list is the tail");
    let mut enc = Encoder::new();
    enc.field(1, data);
    assert_eq!(enc.parts().1.as_ptr(), at, "the tail is the caller's vector, not a copy");

    // A field after the list, a nested record ending in a list and then a
    // scalar, two lists in a row: the same bytes as written flat.
    let mut enc = Encoder::new();
    enc.field(1, vec![1u8, 2, 3]);
    enc.field(2, 9u32);
    enc.record(|e| {
        e.field(1, vec![4u8; 5]);
    });
    enc.put_u32(7);
    enc.field(3, vec![6u8; 2]);
    enc.field(4, vec![8u8; 3]);
    let want = [
        field_bytes(1, &list_bytes(&[1, 2, 3])),
        field_bytes(2, &9u32.to_le_bytes()),
        list_bytes(&field_bytes(1, &list_bytes(&[4; 5]))),
        7u32.to_le_bytes().to_vec(),
        field_bytes(3, &list_bytes(&[6; 2])),
        field_bytes(4, &list_bytes(&[8; 3])),
    ]
    .concat();
    let (body, tail) = enc.parts();
    assert_eq!([body, tail].concat(), want);
    assert_eq!(tail, &[8u8; 3][..]);
    assert_eq!(enc.into_message(3).body(), &want[..]);

    // `clear` keeps nothing but allocations.
    let mut enc = Encoder::new();
    enc.field(1, vec![1u8; 9]);
    enc.clear();
    assert_eq!(enc.parts(), (&[][..], &[][..]));
    assert!(!enc.has_items());
}

/// A message made from an encoder whose last byte list has room in front
/// is that list's vector (the framing moved in front of it); otherwise
/// the list is copied after the framing. Either way the same bytes.
#[test]
fn a_message_from_an_encoder_reuses_the_lists_vector_where_it_has_room() {
    let mut roomy = Vec::with_capacity(64);
    roomy.extend_from_slice(&[5u8; 20]);
    let at = roomy.as_ptr();
    let mut enc = Encoder::new();
    roomy.encode(&mut enc);
    let m = enc.into_message(REPLY_OK);
    assert_eq!(m.body(), &list_bytes(&[5; 20])[..]);
    assert_eq!(m.body().as_ptr(), at, "the list's vector carries the message");
    let tight = vec![6u8; 20];
    let mut enc = Encoder::new();
    tight.encode(&mut enc);
    assert_eq!(enc.into_message(REPLY_OK).body(), &list_bytes(&[6; 20])[..]);
}

/// A fake RPC server answers a typed client's `echo` with what a broken or
/// hostile server could send: counts that promise more or less than the
/// reply holds, a count cut short, trailing bytes, an unknown reply code,
/// a reply with a right nobody asked for, garbage where the fault belongs.
/// Each is a typed error for that call only (the reply is split out of
/// the slot in two pieces and still checked whole), and the next call on
/// the same connection gets its own good answer.
#[test]
fn a_split_reply_that_does_not_match_is_a_typed_error_and_the_connection_goes_on() {
    use ferry::rpc::{ConnectOptions, RpcServer};
    use ferry::Timeout;
    use ferry_idl::RpcChannel;
    let (port, to) = ferry::port().unwrap();
    let (right_rx, right) = ferry::port().unwrap();
    let bad: Vec<Message> = vec![
        reply_with([&5u32.to_le_bytes()[..], b"abc"].concat()),
        reply_with([&2u32.to_le_bytes()[..], b"abc"].concat()),
        reply_with(vec![3, 0]),
        reply_with(vec![]),
        reply_with([&list_bytes(b"abc")[..], b"x"].concat()),
        Message::new(77).with_body(list_bytes(b"abc")),
        reply_with(list_bytes(b"abc")).with_item(right),
        Message::new(ferry_idl::REPLY_FAULT).with_body(vec![0xff; 9]),
    ];
    let cases = bad.len();
    let server = std::thread::spawn(move || {
        let mut srv = RpcServer::new(port).unwrap();
        let mut fixed = bad.into_iter();
        let mut hello = true;
        let mut reply = None;
        loop {
            let (conn, req) = match srv.reply_and_wait(reply.take(), Timeout::Infinite) {
                Ok(r) => r,
                Err(_) => return,
            };
            let answer = if std::mem::take(&mut hello) {
                ferry_idl::answer_hello::<bytes_args::Protocol>(req)
            } else if req.body().ends_with(b"good") {
                reply_with(list_bytes(b"good"))
            } else {
                fixed.next().expect("no more bad replies")
            };
            reply = Some((conn, answer));
        }
    });
    let conn = ferry::rpc::Connection::connect(&to, ConnectOptions::default()).unwrap();
    drop(to);
    let mut c = bytes_args::Client::connect(RpcChannel::new(conn)).unwrap();
    for i in 0..cases {
        match c.echo(b"bad".to_vec()) {
            Err(IdlError::BadReply(_)) if i != 5 && i != 7 => {}
            Err(IdlError::UnexpectedReply(77)) if i == 5 => {}
            Err(IdlError::BadReply(_)) if i == 7 => {}
            other => panic!("bad reply {i}: {other:?}"),
        }
        assert_eq!(c.echo(b"good".to_vec()).unwrap(), b"good", "after bad reply {i}");
    }
    drop(c);
    server.join().unwrap();
    drop(right_rx);
}

/// A reply that is not a byte list is written into its request's buffer
/// when the request was not handed to an argument: answering through a
/// port allocates nothing for the reply.
#[test]
fn a_reply_is_written_into_its_requests_buffer() {
    use ferry_idl::{Dispatch, Route};
    let mut srv = bytes_args::Server(Back::default());
    let nested = vec![vec![1u8; 10], vec![2u8; 20]];
    let req = request(3, |e| e.field(1, nested.clone()));
    let at = req.body().as_ptr();
    let reply = srv.dispatch(req, Route::Rpc).unwrap();
    assert_eq!(reply.body().as_ptr(), at, "the reply was not written into the request's buffer");
    assert_eq!(decode_reply::<Vec<Vec<u8>>, NoError>(reply).unwrap().unwrap(), nested);
}
