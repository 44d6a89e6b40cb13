//! `Model::forward` over several sequences (what `libt2p serve` decodes with) against each alone,
//! bit for bit, on the shared tiny models: three sequences at different positions (one of them
//! still prefilling a chunk, one with nothing to do) in one pass, step after step, with both
//! activation types.

mod reference;
mod runner_data;

use reference::*;
use t2p::matmul::ActQuant;
use t2p::runner::model::{Exec, Loaded, Logits, Seq, Session};
use t2p::runner::sample::argmax;

/// Three prompts of different lengths from the test data's tokenizer.
fn prompts(l: &Loaded) -> Vec<Vec<u32>> {
    [
        "Once upon a time",
        "fn main() { println!(",
        "Grüße aus Köln, 東京 und",
    ]
    .iter()
    .map(|p| l.tokenizer.encode(p, true, true))
    .collect()
}

/// `forward` over `(session, tokens)` pairs, each wanting its last position's logits; returns a
/// copy of each session's.
fn forward_last(
    exec: &Exec,
    l: &Loaded,
    seqs: Vec<(&mut Session, &[u32])>,
) -> t2p::runner::model::Result<Vec<Vec<f32>>> {
    let mut seqs: Vec<Seq> = seqs
        .into_iter()
        .map(|(session, tokens)| Seq {
            session,
            tokens,
            logits: Logits::Last,
        })
        .collect();
    l.model.forward(exec, &mut seqs)?;
    Ok(seqs.iter().map(|s| s.session.logits().to_vec()).collect())
}

/// Runs the batched schedule and the one-sequence-at-a-time schedule side by side and
/// compares every logit row bit for bit.
fn check(l: &Loaded, exec: &Exec, what: &str) {
    let m = &l.model;
    let ps = prompts(l);
    let new = || -> Vec<Session> { (0..ps.len()).map(|_| m.new_session(128)).collect() };
    let (mut batched, mut alone) = (new(), new());
    // Step 0: sequence 0 prefills whole, sequence 1 prefills its first 3 tokens, 2 waits.
    // Step 1: 0 decodes, 1 prefills the rest, 2 prefills whole. Then all decode together.
    let mut next: Vec<Vec<u32>> = vec![ps[0].clone(), ps[1][..3].to_vec(), Vec::new()];
    let mut steps = 0;
    for step in 0..10 {
        let seqs = batched
            .iter_mut()
            .zip(&next)
            .map(|(s, t)| (s, t.as_slice()))
            .collect();
        let got = forward_last(exec, l, seqs).unwrap();
        assert_eq!(got.len(), ps.len());
        let mut following = Vec::new();
        for (i, toks) in next.iter().enumerate() {
            let want = logits_of(m, exec, &mut alone[i], toks, Logits::Last);
            assert_eq!(
                got[i].len(),
                want.len(),
                "{what}: step {step} seq {i} length"
            );
            let same = got[i]
                .iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what}: step {step} seq {i}: batched logits differ");
            assert_eq!(batched[i].len(), alone[i].len());
            following.push(match (step, i) {
                (0, 1) => ps[1][3..].to_vec(),
                (0, 2) => ps[2].clone(),
                _ => vec![argmax(&got[i])],
            });
        }
        next = following;
        steps += 1;
    }
    assert_eq!(steps, 10);
    for (i, s) in batched.iter().enumerate() {
        assert_eq!(s.len(), ps[i].len() + if i == 0 { 9 } else { 8 }, "{what}");
    }
}

fn model(name: &str) -> Option<Loaded> {
    let dir = runner_data::testdata()?.join(name);
    Some(load(&dir.join(format!("{name}-pq2_0.gguf"))))
}

#[test]
fn qwen3_tiny_batched_forward_is_bit_identical() {
    let Some(l) = model("qwen3-tiny") else { return };
    check(&l, &reference_exec(), "qwen3-tiny q8_0");
    check(&l, &Exec::new(2).with_act(ActQuant::Q8K), "qwen3-tiny q8_K");
}

#[test]
fn qwen35_tiny_batched_forward_is_bit_identical() {
    let Some(l) = model("qwen35-tiny") else {
        return;
    };
    check(&l, &reference_exec(), "qwen35-tiny q8_0");
    check(
        &l,
        &Exec::new(2).with_act(ActQuant::Q8K),
        "qwen35-tiny q8_K",
    );
}

#[test]
fn a_bad_sequence_leaves_every_session_untouched() {
    let Some(l) = model("qwen35-tiny") else {
        return;
    };
    let (m, exec) = (&l.model, reference_exec());
    let (mut a, mut b) = (m.new_session(8), m.new_session(8));
    let too_long = [1u32; 9];
    let r = forward_last(
        &exec,
        &l,
        vec![(&mut a, &[1, 2][..]), (&mut b, &too_long[..])],
    );
    assert!(
        r.is_err(),
        "a sequence past its context must fail the batch"
    );
    assert_eq!((a.len(), b.len()), (0, 0));
    let bad_id = [m.n_vocab() as u32];
    assert!(forward_last(&exec, &l, vec![(&mut a, &[1][..]), (&mut b, &bad_id[..])]).is_err());
    assert_eq!((a.len(), b.len()), (0, 0));
    // Both still work afterwards, and give what a fresh session gives.
    let got = forward_last(&exec, &l, vec![(&mut a, &[1, 2][..]), (&mut b, &[3][..])]).unwrap();
    let mut fresh = m.new_session(8);
    assert_eq!(
        got[0],
        logits_of(m, &exec, &mut fresh, &[1, 2], Logits::Last)
    );
}

/// Each sequence of a batch keeps the logits it asks for: every position's, none, or the
/// last one's, bit for bit those of a pass over it alone.
#[test]
fn each_sequence_keeps_the_logits_it_asks_for() {
    let Some(l) = model("qwen3-tiny") else { return };
    let (m, exec) = (&l.model, reference_exec());
    let ps = prompts(&l);
    let asks = [Logits::All, Logits::None, Logits::Last];
    let mut sessions: Vec<Session> = ps.iter().map(|_| m.new_session(64)).collect();
    let mut seqs: Vec<Seq> = sessions
        .iter_mut()
        .zip(&ps)
        .zip(asks)
        .map(|((session, tokens), logits)| Seq {
            session,
            tokens,
            logits,
        })
        .collect();
    m.forward(&exec, &mut seqs).unwrap();
    drop(seqs);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let nv = m.n_vocab();
    for ((s, p), ask) in sessions.iter().zip(&ps).zip(asks) {
        let mut alone = m.new_session(64);
        let all = m.forward_one(&exec, &mut alone, p, Logits::All).unwrap();
        let want = match ask {
            Logits::All => all,
            Logits::None => &[],
            Logits::Last => &all[(p.len() - 1) * nv..],
        };
        assert_eq!(bits(s.logits()), bits(want), "{ask:?}");
        assert_eq!(s.len(), p.len());
    }
}

/// What the prompt cache does with a session: a snapshot taken after a prefix (only the filled
/// K/V rows and the current recurrent state), restored later, then the rest evaluated, gives the
/// logits of the whole prompt evaluated from scratch, bit for bit, step after step.
fn check_snapshot(l: &Loaded, exec: &Exec, what: &str) {
    let m = &l.model;
    for p in prompts(l) {
        let cut = p.len() / 2;
        let mut whole = m.new_session(128);
        let want = forward_last(exec, l, vec![(&mut whole, &p[..])]).unwrap();
        let mut first = m.new_session(128);
        forward_last(exec, l, vec![(&mut first, &p[..cut])]).unwrap();
        let snap = first.snapshot();
        assert!(snap.size_bytes() <= first.size_bytes(), "{what}");
        assert_eq!(snap.len(), cut, "{what}");
        // The same contents moved instead of copied, and (attention only) cut from a session
        // that went further: what the server's cache takes over and leaves in a slot.
        let moved = first.clone().into_snapshot();
        assert_eq!(moved.size_bytes(), snap.size_bytes(), "{what}");
        let mut further = m.new_session(128);
        forward_last(exec, l, vec![(&mut further, &p[..])]).unwrap();
        let cut_back = further.prefix(cut);
        assert_eq!(cut_back.is_some(), further.recurrent.is_none(), "{what}");
        assert_eq!(
            further.prefix(p.len()).map(|s| s.len()),
            Some(p.len()),
            "{what}"
        );
        drop(first);
        let first_want = want.clone();
        for (how, snap) in [
            ("snapshot", Some(snap)),
            ("moved", Some(moved)),
            ("prefix", cut_back),
        ] {
            let Some(snap) = snap else { continue };
            let mut whole = m.new_session(128);
            forward_last(exec, l, vec![(&mut whole, &p[..])]).unwrap();
            let mut want = first_want.clone();
            let mut restored = snap.clone();
            let mut got = forward_last(exec, l, vec![(&mut restored, &p[cut..])]).unwrap();
            for _ in 0..4 {
                let same = want[0]
                    .iter()
                    .zip(&got[0])
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{what}: restored logits differ ({how})");
                let id = [argmax(&want[0])];
                want = forward_last(exec, l, vec![(&mut whole, &id[..])]).unwrap();
                got = forward_last(exec, l, vec![(&mut restored, &id[..])]).unwrap();
            }
        }
        drop(whole);
    }
}

#[test]
fn a_restored_snapshot_gives_the_logits_of_evaluating_from_scratch() {
    for name in ["qwen3-tiny", "qwen35-tiny"] {
        let Some(l) = model(name) else { return };
        check_snapshot(&l, &reference_exec(), name);
    }
}
