//! loom models of wfspan's concurrent structures — the same code the allocator runs, with
//! loom's atomics swapped in through `alloclab_core::sync`.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test --release -p alloclab-wfspan --lib loom`
//! (or `cargo xtask test`).

use std::collections::HashSet;

use alloclab_core::sync::atomic::Ordering;
use alloclab_core::sync::{Arc, model, thread};

use crate::help::{Collected, HelpRecord};
use crate::remote_free::{Consumer, Counted, Node, ReclaimCounter, RemoteFreeList, take_linked};
use crate::span_list::{Link, SpanList};

/// Nodes for a model, leaked so raw pointers stay valid across threads.
fn nodes(n: usize) -> Vec<usize> {
    (0..n)
        .map(|_| Box::into_raw(Box::new(Node::new())) as usize)
        .collect()
}

/// Drains `list` with `deferred`, collecting the addresses handed out.
fn drain_into(list: &RemoteFreeList, deferred: &mut Consumer, out: &mut Vec<usize>) {
    // SAFETY: the model's one consumer, always with the same `deferred`.
    unsafe { list.drain(deferred, |n| out.push(n as usize)) };
}

/// Checks that the nodes handed out (`got`, in order) are exactly `blocks`, each once.
fn assert_each_handed_out_once(got: &[usize], blocks: &[usize]) {
    let unique: HashSet<_> = got.iter().copied().collect();
    assert_eq!(
        unique.len(),
        got.len(),
        "a block was handed out twice: {got:?}"
    );
    assert_eq!(unique, blocks.iter().copied().collect(), "a block was lost");
}

#[test]
fn loom_remote_free_list_with_a_stalled_producer_loses_and_duplicates_nothing() {
    model(|| {
        let list = Arc::new(RemoteFreeList::new());
        let blocks = nodes(3);
        let producers: Vec<_> = [vec![blocks[0], blocks[1]], vec![blocks[2]]]
            .into_iter()
            .map(|mine| {
                let list = list.clone();
                thread::spawn(move || {
                    for node in mine {
                        // SAFETY: each node is pushed once, by one producer; a producer can
                        // be preempted between the swap and the link inside `push`.
                        unsafe { list.push(node as *mut Node) };
                    }
                })
            })
            .collect();
        // The consumer drains while producers may be stalled mid-push.
        let mut deferred = Consumer::new();
        let mut got = Vec::new();
        drain_into(&list, &mut deferred, &mut got);
        for p in producers {
            p.join().unwrap();
        }
        // Once every producer finished, parked chains resolve: everything arrives once.
        drain_into(&list, &mut deferred, &mut got);
        assert!(
            deferred.parked() == 0,
            "a chain stayed parked after all producers finished"
        );
        assert_each_handed_out_once(&got, &blocks);
    });
}

/// How a reuse model's consumer takes nodes: hands each one to the callback.
type Take = fn(&RemoteFreeList, &mut Consumer, &mut dyn FnMut(*mut Node));

/// A model of reuse: this thread pushes one node, a producer pushes `n - 1` more (it may
/// stall between its swap and its link), and `take` hands nodes out while the producer runs
/// and again after it finished. Each node handed out is reused at once (the allocator
/// writes its free-list link into the same word): if a node were handed out before its
/// producer linked it, the late link store would overwrite that reuse. Checks that every
/// node was handed out exactly once, none stayed parked, and none was written after.
fn handed_out_nodes_are_never_written_again(n: usize, take: Take) {
    let reused = core::ptr::without_provenance_mut::<Node>(0x40);
    let list = Arc::new(RemoteFreeList::new());
    let blocks = nodes(n);
    let producer = {
        let (list, mine) = (list.clone(), blocks[1..].to_vec());
        thread::spawn(move || {
            for node in mine {
                // SAFETY: each node is pushed once, by this producer.
                unsafe { list.push(node as *mut Node) };
            }
        })
    };
    // SAFETY: pushed once, by this thread, before it turns consumer.
    unsafe { list.push(blocks[0] as *mut Node) };
    let mut consumer = Consumer::new();
    let mut got = Vec::new();
    let mut reuse = |node: *mut Node| {
        got.push(node as usize);
        // SAFETY: a node of this model, handed to us.
        unsafe { (*node).link_word().store(reused, Ordering::Relaxed) };
    };
    take(&list, &mut consumer, &mut reuse);
    producer.join().unwrap();
    take(&list, &mut consumer, &mut reuse);
    assert_eq!(consumer.parked(), 0, "a chain stayed parked");
    assert_each_handed_out_once(&got, &blocks);
    for node in &blocks {
        // SAFETY: nodes of this model.
        let word = unsafe { (*(*node as *mut Node)).link_word().load(Ordering::Relaxed) };
        assert_eq!(
            word, reused,
            "a producer wrote a block after it was handed out"
        );
    }
}

#[test]
fn loom_remote_free_list_never_hands_out_a_node_its_producer_will_still_write() {
    model(|| {
        handed_out_nodes_are_never_written_again(2, |list, consumer, consume| {
            // SAFETY: the model's one consumer, always with the same `consumer`.
            unsafe { list.drain(consumer, consume) };
        })
    });
}

/// Takes nodes the way the allocator does: from the backlog lent to the active span's slot
/// ([`take_linked`]), and when that runs dry or stalls, one [`RemoteFreeList::pop`] (which
/// parks a stalled node or swaps the list) before lending the backlog again. Stops when
/// `pop` has nothing.
fn take_like_the_allocator(
    list: &RemoteFreeList,
    consumer: &mut Consumer,
    consume: &mut dyn FnMut(*mut Node),
) {
    loop {
        let mut lent = consumer.lend_backlog();
        loop {
            // SAFETY: the lent backlog is the one consumer's chain of pushed nodes.
            let node = unsafe { take_linked(&mut lent) };
            if node.is_null() {
                break;
            }
            consume(node);
        }
        consumer.return_backlog(lent);
        let mut steps = 0;
        // SAFETY: the model's one consumer, always with the same `consumer`.
        let node = unsafe { list.pop(consumer, &mut steps) };
        if node.is_null() {
            return;
        }
        consume(node);
    }
}

#[test]
fn loom_remote_frees_taken_from_a_lent_backlog_are_linked_and_taken_once() {
    // As the allocator's slot path: nodes taken from the backlog lent to the slot, and
    // parking a stalled node after a lend and return.
    model(|| handed_out_nodes_are_never_written_again(3, take_like_the_allocator));
}

#[test]
fn loom_one_shot_pop_racing_a_push_takes_each_span_at_most_once() {
    model(|| {
        let links: Arc<Vec<Link>> = Arc::new((0..3).map(|_| Link::new()).collect());
        let list = Arc::new(SpanList::new());
        // The owner publishes span 0 before the race.
        assert!(list.push_once(0, &links[0]));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (list, links) = (list.clone(), links.clone());
                thread::spawn(move || list.pop_once(|i| &links[i as usize]))
            })
            .collect();
        // The owner pushes spans 1 and 2 while the consumers pop; a push may lose to a pop.
        let mut kept = Vec::new();
        for span in [1, 2] {
            if !list.push_once(span, &links[span as usize]) {
                kept.push(span);
            }
        }
        let mut taken: Vec<u32> = consumers
            .into_iter()
            .filter_map(|c| c.join().unwrap())
            .collect();
        while let Some(span) = list.pop_once(|i| &links[i as usize]) {
            taken.push(span);
        }
        taken.extend(kept);
        taken.sort_unstable();
        assert_eq!(taken, [0, 1, 2], "a span was lost or taken twice");
    });
}

#[test]
fn loom_help_record_completed_by_two_helpers_gives_the_requester_exactly_one_span() {
    model(|| {
        let record = Arc::new(HelpRecord::new());
        record.request(0);
        let helpers: Vec<_> = [10u32, 11]
            .into_iter()
            .map(|span| {
                let record = record.clone();
                thread::spawn(move || {
                    // A helper offers its spare span once; it keeps it if it loses.
                    match record.pending() {
                        Some(0) if record.complete(0, span) => None,
                        _ => Some(span),
                    }
                })
            })
            .collect();
        let collected = record.collect();
        let kept: Vec<u32> = helpers
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        let mut owners: Vec<u32> = kept.clone();
        if let Collected::Span(span) = collected {
            owners.push(span);
        }
        owners.sort_unstable();
        assert_eq!(owners, [10, 11], "a span was lost or duplicated");
        // After the collect, a late helper cannot complete the withdrawn request.
        assert_eq!(record.pending(), None);
    });
}

#[test]
fn loom_span_discarded_while_a_remote_free_arrives_is_reclaimed_exactly_once() {
    model(|| {
        // A span with two blocks out: one freed remotely before the discard is decided,
        // one freed remotely racing the discard.
        let counter = Arc::new(ReclaimCounter::new());
        let list = Arc::new(RemoteFreeList::new());
        let blocks = nodes(2);
        // SAFETY: the first remote free, completed before the race.
        unsafe { list.push(blocks[0] as *mut Node) };
        assert_ne!(counter.remote_free(), Counted::Last);
        // The owner consumed it.
        let mut deferred = Consumer::new();
        let mut consumed = Vec::new();
        drain_into(&list, &mut deferred, &mut consumed);
        let remote_consumed = consumed.len() as u64;
        let freer = {
            let (counter, list, node) = (counter.clone(), list.clone(), blocks[1]);
            thread::spawn(move || {
                // SAFETY: pushed once.
                unsafe { list.push(node as *mut Node) };
                counter.remote_free() == Counted::Last
            })
        };
        // The owner discards: one block is still out (allocated == 1).
        let owner_reclaims = counter.discard(remote_consumed + 1);
        let freer_reclaims = freer.join().unwrap();
        assert!(
            owner_reclaims ^ freer_reclaims,
            "reclaimed by owner: {owner_reclaims}, by freer: {freer_reclaims}"
        );
    });
}

#[test]
fn loom_a_discarded_span_is_taken_back_or_reclaimed_never_both() {
    // Two blocks out when the owner discarded the span; a thread frees both while a heap
    // whose free left it a hint takes the span back. Either the heap owns the span (and no
    // free finds itself the last), or the freer reclaims it (and the heap does not).
    model(|| {
        let counter = Arc::new(ReclaimCounter::new());
        assert!(!counter.discard(2));
        let freer = {
            let counter = counter.clone();
            thread::spawn(move || {
                let first = counter.remote_free();
                let second = counter.remote_free();
                assert_ne!(
                    first,
                    Counted::Last,
                    "the first of two frees cannot be the last"
                );
                second == Counted::Last
            })
        };
        let adopted = counter.adopt();
        let reclaimed = freer.join().unwrap();
        assert!(
            adopted ^ reclaimed,
            "taken back: {adopted}, reclaimed by the last free: {reclaimed}"
        );
    });
}

#[test]
fn loom_two_heaps_taking_back_one_discarded_span_one_wins() {
    model(|| {
        let counter = Arc::new(ReclaimCounter::new());
        assert!(!counter.discard(1));
        let other = {
            let counter = counter.clone();
            thread::spawn(move || counter.adopt())
        };
        let mine = counter.adopt();
        let theirs = other.join().unwrap();
        assert!(mine ^ theirs, "mine: {mine}, theirs: {theirs}");
    });
}

#[test]
fn loom_a_span_discarded_again_with_every_free_in_is_left_to_its_reclaimer() {
    // Discarded with nothing out, which reads like a discard with frees still to come to a
    // heap that loaded the word before: the owner takes it back and discards it again with
    // every free in (so it reclaims the span itself), the word back to the one that heap
    // loaded. That heap's compare-and-swap may succeed; it must not take the span.
    model(|| {
        let counter = Arc::new(ReclaimCounter::new());
        assert!(!counter.discard(2));
        let late = {
            let counter = counter.clone();
            thread::spawn(move || counter.adopt())
        };
        let owner_took_it = counter.adopt();
        let owner_reclaims = owner_took_it && counter.discard(0);
        let late_took_it = late.join().unwrap();
        assert!(
            owner_took_it ^ late_took_it,
            "owner: {owner_took_it}, late heap: {late_took_it}"
        );
        assert!(
            !(late_took_it && owner_reclaims),
            "taken back while its discarder reclaims it"
        );
    });
}

#[test]
fn loom_a_stale_hint_takes_back_only_the_spans_current_life() {
    // A heap loaded the word of a discarded span with one block out; that block's free
    // reclaims the span, which is reset and discarded again (one block out of its new
    // life). Whatever the heap's compare-and-swap found, it took back a life whose free was
    // still to come: before the free (which then counts as an owned span's), or the new one.
    model(|| {
        let counter = Arc::new(ReclaimCounter::new());
        assert!(!counter.discard(1));
        let heap = {
            let counter = counter.clone();
            thread::spawn(move || counter.adopt())
        };
        let reclaimed = counter.remote_free() == Counted::Last;
        if reclaimed {
            counter.reset();
            assert!(!counter.discard(1));
        }
        let taken = heap.join().unwrap();
        let (discarded, count) = counter.state();
        match (taken, reclaimed) {
            // Taken back before the free: the free counted as an owned span's.
            (true, false) => assert_eq!((discarded, count), (false, 1)),
            // The new life taken back, its free still to come.
            (true, true) => assert_eq!((discarded, count), (false, 0)),
            // Not taken: the free reclaimed it and the new life waits, discarded.
            (false, true) => assert_eq!((discarded, count), (true, 0)),
            (false, false) => panic!("neither taken back nor reclaimed"),
        }
    });
}

#[test]
fn loom_an_empty_span_is_not_reused_while_a_remote_free_has_yet_to_count_itself() {
    // The owner takes a remotely freed block back (its producer has linked it) before that
    // producer has counted the free. When every block is back the owner gives the span up
    // through `discard(consumed)`: it may reuse the span only if the count is complete;
    // otherwise the late count must reclaim it. Exactly one of them does.
    model(|| {
        let counter = Arc::new(ReclaimCounter::new());
        let list = Arc::new(RemoteFreeList::new());
        let node = nodes(1)[0];
        let freer = {
            let (counter, list) = (counter.clone(), list.clone());
            thread::spawn(move || {
                // SAFETY: pushed once.
                unsafe { list.push(node as *mut Node) };
                counter.remote_free() == Counted::Last
            })
        };
        let mut consumer = Consumer::new();
        let mut got = Vec::new();
        drain_into(&list, &mut consumer, &mut got);
        let span_empty = got.len() == 1;
        let owner_reuses = span_empty && counter.discard(got.len() as u64);
        let freer_reclaims = freer.join().unwrap();
        if span_empty {
            assert!(
                owner_reuses ^ freer_reclaims,
                "owner reuses: {owner_reuses}, late count reclaims: {freer_reclaims}"
            );
        } else {
            // The block is still out: the span is not given up, nobody reclaims it.
            assert!(!freer_reclaims);
        }
    });
}
