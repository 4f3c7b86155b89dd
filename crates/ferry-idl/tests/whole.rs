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
