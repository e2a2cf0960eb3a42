//! The public line parsers (`basis_cli::lines`, the fuzz targets' entry
//! points): good records parse, malformed input is a `LineError` with the
//! reason `basis` reports, and degenerate bytes are errors, not panics.

use basis_cli::lines;

#[test]
fn criteo_lines() {
    let good = format!("1{}{}", "\t5".repeat(13), "\tab12".repeat(26));
    let r = lines::criteo(good.as_bytes()).unwrap();
    assert_eq!((r.label, r.features.len(), r.time), (1.0, 39, None));
    let e = lines::criteo(b"1\t2\t3").unwrap_err();
    assert!(
        e.reason()
            .contains("expected 40 tab-separated columns, found 3"),
        "{e}"
    );
    let bad_int = format!("0\tx{}{}", "\t5".repeat(12), "\tab".repeat(26));
    assert!(
        lines::criteo(bad_int.as_bytes())
            .unwrap_err()
            .reason()
            .contains("I1")
    );
}

#[test]
fn libsvm_lines() {
    let r = lines::libsvm(b"-1 0:2 7:-1.5 # comment").unwrap();
    assert_eq!(r.label, 0.0);
    assert_eq!(
        r.features.iter().map(|f| f.1).collect::<Vec<_>>(),
        [2.0, -1.5]
    );
    assert_eq!(
        lines::libsvm(b"  # only a comment").unwrap_err().reason(),
        "blank line"
    );
    assert!(
        lines::libsvm(b"1 qid:3 1:1")
            .unwrap_err()
            .reason()
            .contains("qid")
    );
    assert_eq!(
        lines::libsvm(b"1 \xff:1").unwrap_err().reason(),
        "not UTF-8"
    );
}

#[test]
fn movielens_lines() {
    let r = lines::movielens_udata(b"196\t242\t4\t881250949").unwrap();
    assert_eq!(
        (r.label, r.features.len(), r.time),
        (1.0, 2, Some(881_250_949))
    );
    assert_eq!(lines::movielens_udata(b"1 2 3.5 10").unwrap().label, 0.0);
    let e = lines::movielens_udata(b"1 2 x 10").unwrap_err();
    assert_eq!(e.reason(), "rating `x` is not a number");
    assert_eq!(e.line(), 0);
    assert!(
        lines::movielens_udata(b"")
            .unwrap_err()
            .reason()
            .contains("found 0")
    );
}

#[test]
fn recbole_files() {
    let inter = b"user_id:token\titem_id:token\trating:float\ttimestamp:float\n1\t2\t5\t7\n\n3\t4\t1\t8\r\n";
    let v = lines::recbole_inter(inter).unwrap();
    assert_eq!(
        v.iter().map(|r| (r.label, r.time)).collect::<Vec<_>>(),
        [(1.0, Some(7)), (0.0, Some(8))]
    );
    let e = lines::recbole_inter(b"user_id:token\titem_id:token\n").unwrap_err();
    assert_eq!((e.line(), e.reason()), (1, "header has no `rating` column"));
    let e = lines::recbole_inter(b"user_id\n").unwrap_err();
    assert!(e.reason().contains("is not `name:type`"), "{e}");
    let mut short = inter.to_vec();
    short.extend_from_slice(b"9\t9\n");
    let e = lines::recbole_inter(&short).unwrap_err();
    assert_eq!(e.line(), 5);
    assert!(
        e.to_string()
            .starts_with("line 5: expected 4 tab-separated columns, found 2"),
        "{e}"
    );
    assert!(lines::recbole_inter(b"").is_err());

    let side = lines::recbole_side(
        b"user_id:token\ttags:token_seq\tage:float\nu1\ta b c\t3\n",
        "user_id",
    )
    .unwrap();
    assert_eq!(side.len(), 1);
    assert_eq!(
        side[0].1.len(),
        3,
        "each token of a token_seq is a feature; floats are unused"
    );
    let e = lines::recbole_side(b"user_id:token\tx:token\nu1\n", "user_id").unwrap_err();
    assert_eq!(e.line(), 2);
    assert!(lines::recbole_side(b"item_id:token\n", "user_id").is_err());
}

#[test]
fn text_documents() {
    let f = lines::text_document(b"Subject: hi\n\nBuy cheap pills now", true).unwrap();
    // Tokens buy cheap pills now + 3 bigrams, each weighted 1/sqrt(7).
    assert_eq!(f.len(), 7);
    assert!(f.iter().all(|x| (x.1 - 1.0 / 7f32.sqrt()).abs() < 1e-7));
    let e = lines::text_document(b"a ! ? \xff", false).unwrap_err();
    assert_eq!(e.reason(), "document has no tokens");
    assert!(lines::text_document(b"", true).is_err());
}
