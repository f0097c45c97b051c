//! Memory's vector index (`soorma::memory`, an HNSW graph from usearch) on 100,000 vectors of
//! 384 dimensions shaped like sentence embeddings, with the index's default configuration
//! (`IndexConfig::default()`), measured in one run against exact (brute-force) search.
//!
//! ```text
//! cargo bench -p soorma-tests --bench memory
//! ```
//!
//! The vectors: 1,000 random topic centres; each vector is a centre plus gaussian noise (a
//! spread drawn per topic) plus a small direction shared by all (real embeddings are not
//! centred), normalized. Queries are drawn the same way (new vectors, not stored ones).
//!
//! Prints:
//! - the build: vectors inserted in one batch (`insert_many`, the rebuild path, on several
//!   threads) and, into a second index, one by one (`insert`, the online path): time and
//!   vectors/s; then single inserts and replacements into the full index;
//! - the resident memory (VmRSS) before and after the batch build, per vector;
//! - 1,000 queries for the 10 nearest: approximate (HNSW) p50 / p95 / p99 and exact p50 / p95,
//!   recall@10 of the approximate results against the exact ones;
//! - the same with predicates passing 50 %, 33 %, 10 % and 1 % of the keys (`Filter::Predicate`;
//!   and exactly, over those keys), with usearch's own filtered graph search at 10 % for
//!   reference; and an exact search among 1,000 listed keys (`Filter::Keys`);
//! - searches per second with 2 threads.
//!
//! `RATIO` lines:
//! - `memory_query_p95_ann_vs_exact`: approximate p95 / exact p95;
//! - `memory_recall_at_10`: recall@10 of approximate search (target ≥ 0.95);
//! - `memory_filtered_query_p95_ann_vs_exact`, `memory_filtered_recall_at_10`: the same with
//!   the 10 % predicate (`search` / exact). About 1 at 100,000 vectors: `search` estimates
//!   that fewer than `exact_below` (10,000) pass and compares those exactly, which costs
//!   about what usearch's filtered graph search costs there (printed for reference).
//!
//! and a `TARGET` line: approximate p95 ≤ 10 ms and recall@10 ≥ 0.95, met or not.
//!
//! Knobs: `SOORMA_BENCH_MEM_VECTORS` (default 100,000), `SOORMA_BENCH_MEM_QUERIES` (1,000),
//! `SOORMA_BENCH_MEM_DIMS` (384), `SOORMA_BENCH_MEM_ONE_BY_ONE=0` (skip the one-by-one build);
//! for tuning, `SOORMA_BENCH_MEM_CONNECTIVITY`, `SOORMA_BENCH_MEM_EXPANSION_ADD`,
//! `SOORMA_BENCH_MEM_EXPANSION_SEARCH`, `SOORMA_BENCH_MEM_EXACT_BELOW` override the defaults
//! (the first line then says so).

use std::time::{Duration, Instant};

use soorma::memory::__bench::VectorIndex;
use soorma::memory::IndexConfig;

const VECTORS: usize = 100_000;
const DIMENSIONS: usize = 384;
const QUERIES: usize = 1_000;
const TOPICS: usize = 1_000;
const K: usize = 10;
/// Single inserts timed into the full index.
const ONLINE_INSERTS: usize = 2_000;
/// Keys of the `Filter::Keys` search.
const LISTED_KEYS: usize = 1_000;
const SEED: u64 = 0x5EED_3E30_0001;

const TARGET_P95_MS: f64 = 10.0;
const TARGET_RECALL: f64 = 0.95;

// ---------------------------------------------------------------------------------------------
// Data.

/// xorshift64*: a tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[0, 1)`.
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Standard normal (Box–Muller).
    fn gaussian(&mut self) -> f32 {
        let u = self.uniform().max(f32::MIN_POSITIVE);
        let v = self.uniform();
        (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Topics of sentence-embedding-like vectors.
struct Corpus {
    dims: usize,
    /// Shared by every vector (embeddings are anisotropic).
    common: Vec<f32>,
    centres: Vec<Vec<f32>>,
    /// Each topic's noise scale (how loose it is).
    spreads: Vec<f32>,
}

impl Corpus {
    fn new(rng: &mut Rng, dims: usize, topics: usize) -> Self {
        let random_unit = |rng: &mut Rng| {
            let mut v: Vec<f32> = (0..dims).map(|_| rng.gaussian()).collect();
            soorma::memory::normalize(&mut v);
            v
        };
        let common = random_unit(rng);
        let centres = (0..topics).map(|_| random_unit(rng)).collect();
        let spreads = (0..topics).map(|_| 0.7 + 0.6 * rng.uniform()).collect();
        Corpus {
            dims,
            common,
            centres,
            spreads,
        }
    }

    /// A vector of a random topic.
    fn draw(&self, rng: &mut Rng) -> Vec<f32> {
        let topic = rng.below(self.centres.len());
        let scale = self.spreads[topic] / (self.dims as f32).sqrt();
        let mut v: Vec<f32> = self.centres[topic]
            .iter()
            .zip(&self.common)
            .map(|(c, m)| c + 0.4 * m + scale * rng.gaussian())
            .collect();
        soorma::memory::normalize(&mut v);
        v
    }
}

// ---------------------------------------------------------------------------------------------
// Measurements.

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `p`-th percentile (0–100) of `samples`, sorted.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

struct Latencies(Vec<Duration>);

impl Latencies {
    fn sorted(mut self) -> Vec<Duration> {
        self.0.sort();
        self.0
    }
}

fn print_latencies(label: &str, sorted: &[Duration], p99: bool) {
    let mut line = format!(
        "  {label:<34} p50 {:>8.3} ms   p95 {:>8.3} ms",
        ms(percentile(sorted, 50.0)),
        ms(percentile(sorted, 95.0)),
    );
    if p99 {
        line.push_str(&format!("   p99 {:>8.3} ms", ms(percentile(sorted, 99.0))));
    }
    println!("{line}");
}

/// The fraction of `truth`'s keys found in `got`, over all queries.
fn recall_of(truth: &[Vec<u64>], got: &[Vec<u64>]) -> f64 {
    let (mut found, mut wanted) = (0, 0);
    for (t, g) in truth.iter().zip(got) {
        wanted += t.len();
        found += t.iter().filter(|k| g.contains(k)).count();
    }
    if wanted == 0 {
        1.0
    } else {
        found as f64 / wanted as f64
    }
}

fn keys(hits: &[(u64, f32)]) -> Vec<u64> {
    hits.iter().map(|(k, _)| *k).collect()
}

type Predicate<'a> = Option<&'a (dyn Fn(u64) -> bool + Sync)>;

/// Runs each query approximately and exactly (alternating, so machine noise hits both alike):
/// the latencies of both and the keys found.
fn compare(
    index: &VectorIndex,
    queries: &[Vec<f32>],
    predicate: Predicate<'_>,
) -> (Vec<Duration>, Vec<Duration>, f64) {
    let (mut ann, mut exact) = (Vec::new(), Vec::new());
    let (mut ann_keys, mut exact_keys) = (Vec::new(), Vec::new());
    for q in queries {
        let started = Instant::now();
        let hits = index.search(q, K, predicate).expect("search");
        ann.push(started.elapsed());
        ann_keys.push(keys(&hits));
        let started = Instant::now();
        let hits = index.exact_search(q, K, predicate).expect("exact search");
        exact.push(started.elapsed());
        exact_keys.push(keys(&hits));
    }
    for (hits, truth) in ann_keys.iter().zip(&exact_keys) {
        if let Some(p) = predicate {
            assert!(
                hits.iter().all(|k| p(*k)),
                "a filtered search broke its filter"
            );
        }
        assert_eq!(truth.len(), K);
    }
    let recall = recall_of(&exact_keys, &ann_keys);
    (Latencies(ann).sorted(), Latencies(exact).sorted(), recall)
}

// ---------------------------------------------------------------------------------------------
// Phases.

/// Builds the index with one `insert_many` (the rebuild path), and another one `insert` at a
/// time (the online path; unless `one_by_one` is false); returns the first.
fn build(config: &IndexConfig, dims: usize, data: &[Vec<f32>], one_by_one: bool) -> VectorIndex {
    let n = data.len() as f64;
    println!("Build ({} vectors of {dims} dimensions)", data.len());
    let rss_before = soorma_tests::rss_kib();
    let index = VectorIndex::new(dims, config).expect("index");
    let items: Vec<(u64, &[f32])> = data
        .iter()
        .enumerate()
        .map(|(i, v)| (i as u64, v.as_slice()))
        .collect();
    let started = Instant::now();
    index.insert_many(&items).expect("insert_many");
    let batch = started.elapsed();
    drop(items);
    let rss_after = soorma_tests::rss_kib();
    assert_eq!(index.len(), data.len());
    println!(
        "  insert_many, {} threads             {:>8.2} s   {:>8.0} vectors/s",
        std::thread::available_parallelism().map_or(1, |p| p.get()),
        batch.as_secs_f64(),
        n / batch.as_secs_f64(),
    );

    if one_by_one {
        let other = VectorIndex::new(dims, config).expect("index");
        let started = Instant::now();
        for (i, v) in data.iter().enumerate() {
            other.insert(i as u64, v).expect("insert");
        }
        let elapsed = started.elapsed();
        assert_eq!(other.len(), data.len());
        println!(
            "  insert, one by one                 {:>8.2} s   {:>8.0} vectors/s   {:>6.1} µs/vector",
            elapsed.as_secs_f64(),
            n / elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / n,
        );
    }

    let grown = rss_after.saturating_sub(rss_before);
    let raw = data.len() * dims * 4;
    println!(
        "Memory: RSS {} MiB before, {} MiB after building: +{} MiB, {:.0} bytes/vector \
         (the f32 vectors alone: {} bytes/vector; {:.2}x)",
        rss_before / 1024,
        rss_after / 1024,
        grown / 1024,
        grown as f64 * 1024.0 / n,
        dims * 4,
        grown as f64 * 1024.0 / raw as f64,
    );
    index
}

/// Single inserts (new keys) and replacements into the full index.
fn online_inserts(index: &VectorIndex, corpus: &Corpus, rng: &mut Rng) {
    let base = index.len() as u64;
    let fresh: Vec<Vec<f32>> = (0..ONLINE_INSERTS).map(|_| corpus.draw(rng)).collect();
    let mut times = Vec::with_capacity(ONLINE_INSERTS);
    for (i, v) in fresh.iter().enumerate() {
        let started = Instant::now();
        index.insert(base + i as u64, v).expect("insert");
        times.push(started.elapsed());
    }
    let mut replaced = Vec::with_capacity(ONLINE_INSERTS);
    for (i, v) in fresh.iter().enumerate() {
        let key = rng.below(base as usize) as u64;
        let started = Instant::now();
        index.insert(key, v).expect("replace");
        replaced.push(started.elapsed());
        // Back to the original count: remove the fresh key again.
        index.remove(base + i as u64).expect("remove");
    }
    println!("Single inserts into the full index ({ONLINE_INSERTS} each)");
    print_latencies("insert (new key)", &Latencies(times).sorted(), true);
    print_latencies(
        "insert (replacing a key)",
        &Latencies(replaced).sorted(),
        true,
    );
}

/// Searches per second with two threads searching at once.
fn throughput(index: &VectorIndex, queries: &[Vec<f32>]) {
    let threads = 2;
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                for q in queries.iter().skip(t).step_by(threads) {
                    index.search(q, K, None).expect("search");
                }
            });
        }
    });
    let elapsed = started.elapsed();
    println!(
        "Throughput: {:.0} approximate searches/s with {threads} threads",
        queries.len() as f64 / elapsed.as_secs_f64()
    );
}

fn main() {
    let n = env_usize("SOORMA_BENCH_MEM_VECTORS", VECTORS).max(K);
    let n_queries = env_usize("SOORMA_BENCH_MEM_QUERIES", QUERIES).max(1);
    let dims = env_usize("SOORMA_BENCH_MEM_DIMS", DIMENSIONS).max(1);
    let defaults = IndexConfig::default();
    let config = defaults
        .clone()
        .with_connectivity(env_usize(
            "SOORMA_BENCH_MEM_CONNECTIVITY",
            defaults.connectivity,
        ))
        .with_expansion_add(env_usize(
            "SOORMA_BENCH_MEM_EXPANSION_ADD",
            defaults.expansion_add,
        ))
        .with_expansion_search(env_usize(
            "SOORMA_BENCH_MEM_EXPANSION_SEARCH",
            defaults.expansion_search,
        ))
        .with_exact_below(env_usize(
            "SOORMA_BENCH_MEM_EXACT_BELOW",
            defaults.exact_below,
        ));
    let one_by_one = env_usize("SOORMA_BENCH_MEM_ONE_BY_ONE", 1) != 0;
    println!(
        "IndexConfig{}: exact_below {}, connectivity {}, expansion_add {}, \
         expansion_search {}, max_vectors {}",
        if config == defaults {
            "::default()"
        } else {
            " (NOT the defaults)"
        },
        config.exact_below,
        config.connectivity,
        config.expansion_add,
        config.expansion_search,
        config.max_vectors,
    );

    let mut rng = Rng(SEED);
    let corpus = Corpus::new(&mut rng, dims, TOPICS);
    let data: Vec<Vec<f32>> = (0..n).map(|_| corpus.draw(&mut rng)).collect();
    let queries: Vec<Vec<f32>> = (0..n_queries).map(|_| corpus.draw(&mut rng)).collect();

    let index = build(&config, dims, &data, one_by_one);
    online_inserts(&index, &corpus, &mut rng);
    assert_eq!(index.len(), n);

    // Warm up (caches, page faults of the exact scans).
    for q in queries.iter().take(50) {
        index.search(q, K, None).expect("search");
        index.exact_search(q, K, None).expect("exact search");
    }

    let (ann, exact, recall) = compare(&index, &queries, None);
    println!("Queries ({n_queries}, k = {K}, {n} vectors)");
    print_latencies("approximate (HNSW)", &ann, true);
    print_latencies("exact (brute force)", &exact, false);
    println!("  recall@{K}: {recall:.4}");

    // Filtered: `search` picks its way by the share of keys passing (exact over them when
    // few pass, the graph's nearest filtered when many do, the graph search skipping failing
    // keys in between).
    let mut tenth = None;
    for modulus in [2_u64, 3, 10, 100] {
        let passes = move |key: u64| key % modulus == modulus / 2;
        let (f_ann, f_exact, f_recall) = compare(&index, &queries, Some(&passes));
        println!(
            "Filtered queries (a predicate passing {} % of the keys)",
            100 / modulus
        );
        print_latencies("search (filtered)", &f_ann, true);
        print_latencies("exact (over the passing keys)", &f_exact, false);
        println!("  recall@{K}: {f_recall:.4}");
        if modulus == 10 {
            // For reference: usearch's filtered graph search, which `search` uses only when
            // neither of the others fits.
            let mut times = Vec::with_capacity(queries.len());
            let mut found = Vec::with_capacity(queries.len());
            for q in &queries {
                let started = Instant::now();
                let hits = index.graph_search_filtered(q, K, &passes).expect("search");
                times.push(started.elapsed());
                assert!(hits.iter().all(|(k, _)| passes(*k)));
                found.push(keys(&hits));
            }
            let mut truth = Vec::with_capacity(queries.len());
            for q in &queries {
                truth.push(keys(
                    &index.exact_search(q, K, Some(&passes)).expect("search"),
                ));
            }
            print_latencies(
                "(usearch filtered_search)",
                &Latencies(times).sorted(),
                true,
            );
            println!(
                "  (usearch filtered_search) recall@{K}: {:.4}",
                recall_of(&truth, &found)
            );
            tenth = Some((f_ann, f_exact, f_recall));
        }
    }
    let (f_ann, f_exact, f_recall) = tenth.expect("the 10 % filter ran");

    let listed: Vec<u64> = (0..LISTED_KEYS).map(|_| rng.below(n) as u64).collect();
    let mut by_keys = Vec::with_capacity(n_queries);
    for q in &queries {
        let started = Instant::now();
        let hits = index.search_keys(q, K, &listed).expect("search");
        by_keys.push(started.elapsed());
        assert!(hits.iter().all(|(k, _)| listed.contains(k)));
    }
    println!("Exact search among {LISTED_KEYS} listed keys (Filter::Keys)");
    print_latencies("exact (listed keys)", &Latencies(by_keys).sorted(), false);

    throughput(&index, &queries);

    // The rebuild from the state store, through `Memory`: benches/memory_store.rs.

    let p95 = percentile(&ann, 95.0);
    println!(
        "RATIO memory_query_p95_ann_vs_exact {:.4}",
        ms(p95) / ms(percentile(&exact, 95.0))
    );
    println!("RATIO memory_recall_at_10 {recall:.4}");
    println!(
        "RATIO memory_filtered_query_p95_ann_vs_exact {:.4}",
        ms(percentile(&f_ann, 95.0)) / ms(percentile(&f_exact, 95.0))
    );
    println!("RATIO memory_filtered_recall_at_10 {f_recall:.4}");
    let met = |ok: bool| if ok { "met" } else { "NOT MET" };
    println!(
        "TARGET memory ({n} x {dims}): approximate query p95 {:.3} ms (target ≤ {TARGET_P95_MS} ms: {}), \
         recall@{K} {recall:.4} (target ≥ {TARGET_RECALL}: {})",
        ms(p95),
        met(ms(p95) <= TARGET_P95_MS),
        met(recall >= TARGET_RECALL),
    );
}
