//! Tests shared by every heap that can be a `#[global_allocator]`.

/// Defines the integration tests every heap usable as `#[global_allocator]` runs, against the
/// `static` named `$global` (which the test file installs with `#[global_allocator]`): std
/// collections served by it, threads and channels passing heap data between threads, shared
/// state behind a mutex, and reallocation through `Vec` growth. Each heap's test file adds
/// its own (thread exit, heap adoption ...).
///
/// ```ignore
/// #[global_allocator]
/// static GLOBAL: MyHeap = MyHeap::new();
/// alloclab_core::global_allocator_tests!(GLOBAL);
/// ```
#[macro_export]
macro_rules! global_allocator_tests {
    ($global:ident) => {
        #[test]
        fn std_collections_work_and_are_served_by_the_global_heap() {
            let before = $crate::Allocator::stats(&$global).allocations.unwrap();
            let mut map: ::std::collections::HashMap<String, Vec<u32>> =
                ::std::collections::HashMap::new();
            for i in 0..10_000u32 {
                map.entry(format!("key-{}", i % 997)).or_default().push(i);
            }
            let tree: ::std::collections::BTreeMap<u32, String> =
                (0..5_000).map(|i| (i, i.to_string())).collect();
            let mut deque: ::std::collections::VecDeque<Box<[u8]>> =
                (0..1000).map(|i| vec![i as u8; i].into()).collect();
            deque.rotate_left(333);
            assert_eq!(map.len(), 997);
            assert_eq!(map.values().map(Vec::len).sum::<usize>(), 10_000);
            assert_eq!(tree[&4242], "4242");
            assert!(
                deque
                    .iter()
                    .all(|b| b.iter().all(|&x| x as usize == b.len() % 256))
            );
            assert!($crate::Allocator::stats(&$global).allocations.unwrap() > before + 10_000);
        }

        #[test]
        fn threads_and_channels_pass_heap_data_between_threads() {
            let (tx, rx) = ::std::sync::mpsc::channel::<Vec<String>>();
            let producers: Vec<_> = (0..8)
                .map(|t| {
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        for round in 0..200 {
                            tx.send((0..50).map(|i| format!("{t}/{round}/{i}")).collect())
                                .unwrap();
                        }
                    })
                })
                .collect();
            drop(tx);
            // Strings allocated by the producers are freed here: remote frees.
            let total: usize = rx.iter().map(|batch| batch.len()).sum();
            for p in producers {
                p.join().unwrap();
            }
            assert_eq!(total, 8 * 200 * 50);
        }

        #[test]
        fn shared_state_behind_a_mutex_grows_and_shrinks() {
            let shared = ::std::sync::Arc::new(::std::sync::Mutex::new(Vec::<Vec<u64>>::new()));
            let workers: Vec<_> = (0..4)
                .map(|t| {
                    let shared = shared.clone();
                    std::thread::spawn(move || {
                        for i in 0..2_000u64 {
                            let mut v = shared.lock().unwrap();
                            if i % 3 == 0 {
                                v.pop();
                            } else {
                                v.push(vec![t; (i % 500) as usize + 1]);
                            }
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            let v = shared.lock().unwrap();
            assert!(v.iter().all(|inner| inner.iter().all(|&x| x == inner[0])));
        }

        #[test]
        fn realloc_through_vec_growth_keeps_contents() {
            let mut v: Vec<u32> = Vec::new();
            for i in 0..200_000 {
                v.push(i);
            }
            v.shrink_to_fit();
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
            let big = vec![7u8; 5 << 20];
            assert!(big.iter().all(|&b| b == 7));
        }
    };
}
