//! Memory through its public API (`soorma::memory`), on the embedded platform: storing
//! documents, rebuilding the indexes from the store, end-to-end queries, and the local
//! embedding model's throughput. (`benches/memory.rs` measures the vector index alone.)
//!
//! ```text
//! cargo bench -p soorma-tests --bench memory_store
//! ```
//!
//! - Upserts `SOORMA_BENCH_MEMORY_DOCS` (default 100,000) one-chunk documents whose 384-d
//!   vectors are clustered like sentence embeddings (a table embedder maps each text to its
//!   vector, so no model time is in these figures): upserts per second.
//! - Starts a second `Memory` on the same store and times `build()`: the rebuild of the index
//!   from the store's records (read through the state watch, decoded, indexed).
//! - 1,000 queries through `Knowledge::query` (k = 10): p50 / p95 / p99, and recall@10 against
//!   an exact search over the same vectors: `RATIO memory_e2e_query_p95_vs_exact`.
//! - The local model (all-MiniLM-L6-v2 from `SOORMA_EMBED_MODEL` or
//!   target/models/all-MiniLM-L6-v2): sentences per second, 1,000 short sentences in one call
//!   and one at a time (`RATIO memory_embed_batched_vs_one_by_one`, time per sentence).

use std::sync::Arc;
use std::time::{Duration, Instant};

use soorma::BoxFuture;
use soorma::memory::embed::LocalEmbedder;
use soorma::memory::{Document, Embedder, IndexConfig, Memory, MemoryConfig, Query};

const DIMS: usize = 384;
const CLUSTERS: usize = 1_000;
const QUERIES: usize = 1_000;

/// xorshift64*: a seeded PRNG.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Roughly normal (sum of uniforms).
    fn gauss(&mut self) -> f32 {
        (0..4)
            .map(|_| (self.next() >> 40) as f32 / (1u64 << 24) as f32)
            .sum::<f32>()
            - 2.0
    }
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    soorma::memory::normalize(&mut v);
    v
}

/// Vectors around `CLUSTERS` random centres.
fn clustered(n: usize, rng: &mut Rng, centres: &[Vec<f32>]) -> Vec<Vec<f32>> {
    (0..n)
        .map(|_| {
            let c = &centres[(rng.next() % centres.len() as u64) as usize];
            unit(
                c.iter()
                    .map(|x| x + 0.35 * rng.gauss() / (DIMS as f32).sqrt() * 4.0)
                    .collect(),
            )
        })
        .collect()
}

/// Maps `doc <i>` and `query <i>` texts to their precomputed vectors.
struct Table {
    docs: Arc<Vec<Vec<f32>>>,
    queries: Arc<Vec<Vec<f32>>>,
}

impl Embedder for Table {
    fn model(&self) -> &str {
        "bench-table"
    }
    fn dimensions(&self) -> usize {
        DIMS
    }
    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, soorma::Result<Vec<Vec<f32>>>> {
        Box::pin(async move {
            Ok(texts
                .iter()
                .map(|t| {
                    let (kind, i) = t.split_once(' ').expect("`<kind> <i>`");
                    let i: usize = i.parse().expect("an index");
                    match kind {
                        "doc" => self.docs[i].clone(),
                        _ => self.queries[i].clone(),
                    }
                })
                .collect())
        })
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn rss_mib() -> f64 {
    soorma_tests::rss_kib() as f64 / 1024.0
}

fn exact_top(docs: &[Vec<f32>], q: &[f32], k: usize) -> Vec<usize> {
    let mut scored: Vec<(f32, usize)> = docs
        .iter()
        .enumerate()
        .map(|(i, d)| (d.iter().zip(q).map(|(a, b)| a * b).sum::<f32>(), i))
        .collect();
    scored.select_nth_unstable_by(k, |a, b| b.0.total_cmp(&a.0));
    scored.truncate(k);
    scored.into_iter().map(|(_, i)| i).collect()
}

async fn store_and_rebuild(n: usize) {
    let mut rng = Rng(0x5EED_0001);
    let centres: Vec<Vec<f32>> = (0..CLUSTERS)
        .map(|_| unit((0..DIMS).map(|_| rng.gauss()).collect()))
        .collect();
    let docs = Arc::new(clustered(n, &mut rng, &centres));
    let queries = Arc::new(clustered(QUERIES, &mut rng, &centres));
    let table = || Table {
        docs: docs.clone(),
        queries: queries.clone(),
    };
    let config = MemoryConfig::default()
        .with_sweep_interval(None)
        .with_quotas(n + 1, 1_000)
        .with_index(IndexConfig::default());
    let platform = soorma::Platform::embedded();
    let rss0 = rss_mib();
    let writer = Memory::builder(&platform)
        .embedder(table())
        .config(config.clone())
        .build()
        .await
        .expect("memory");
    let knowledge = writer.tenant("acme").expect("tenant").knowledge();
    let started = Instant::now();
    for i in 0..n {
        knowledge
            .upsert(Document::new(format!("doc {i}")).id(format!("d{i}")))
            .await
            .expect("upsert");
    }
    let upsert = started.elapsed();
    println!(
        "memory_store: {n} upserts in {:.2} s: {:.0} documents/s (embedded, one chunk each, table embedder)",
        upsert.as_secs_f64(),
        n as f64 / upsert.as_secs_f64()
    );
    let rss_writer = rss_mib();
    drop(knowledge);
    drop(writer);
    let started = Instant::now();
    let memory = Memory::builder(&platform)
        .embedder(table())
        .config(config)
        .build()
        .await
        .expect("rebuild");
    let rebuild = started.elapsed();
    println!(
        "memory_store: rebuild of the index from the store ({n} documents): {:.2} s, {:.0} documents/s",
        rebuild.as_secs_f64(),
        n as f64 / rebuild.as_secs_f64()
    );
    println!(
        "memory_store: RSS {rss0:.0} MiB before, {rss_writer:.0} MiB with the store and one memory, {:.0} MiB after the rebuild",
        rss_mib()
    );
    let knowledge = memory.tenant("acme").expect("tenant").knowledge();
    let mut times = Vec::with_capacity(QUERIES);
    let mut found = 0;
    for j in 0..QUERIES {
        let started = Instant::now();
        let hits = knowledge
            .query(Query::new(format!("query {j}")).k(10))
            .await
            .expect("query");
        times.push(started.elapsed());
        let exact = exact_top(&docs, &queries[j], 10);
        found += hits
            .iter()
            .filter(|h| exact.contains(&h.id[1..].parse::<usize>().expect("d<i>")))
            .count();
    }
    let mut exact_times = Vec::with_capacity(100);
    for q in queries.iter().take(100) {
        let started = Instant::now();
        std::hint::black_box(exact_top(&docs, q, 10));
        exact_times.push(started.elapsed());
    }
    times.sort();
    exact_times.sort();
    let recall = found as f64 / (QUERIES * 10) as f64;
    let p95 = percentile(&times, 0.95);
    println!(
        "memory_store: Knowledge::query k=10 over {n}: p50 {:.3} ms, p95 {:.3} ms, p99 {:.3} ms; recall@10 {recall:.4}; exact search p50 {:.3} ms, p95 {:.3} ms",
        ms(percentile(&times, 0.5)),
        ms(p95),
        ms(percentile(&times, 0.99)),
        ms(percentile(&exact_times, 0.5)),
        ms(percentile(&exact_times, 0.95)),
    );
    println!(
        "RATIO memory_e2e_query_p95_vs_exact {:.4}",
        p95.as_secs_f64() / percentile(&exact_times, 0.95).as_secs_f64()
    );
    println!("RATIO memory_e2e_recall_at_10 {recall:.4}");
    println!(
        "memory_store: targets p95 <= 10 ms ({}), recall@10 >= 0.95 ({})",
        if ms(p95) <= 10.0 { "met" } else { "NOT met" },
        if recall >= 0.95 { "met" } else { "NOT met" }
    );
}

async fn embedding_throughput() {
    let model = match LocalEmbedder::from_env().or_else(|_| {
        LocalEmbedder::load(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/models/all-MiniLM-L6-v2"),
        )
    }) {
        Ok(model) => model,
        Err(e) => {
            println!("memory_store: no local model, embedding throughput skipped: {e}");
            return;
        }
    };
    let subjects = [
        "The customer",
        "Our team",
        "The new laptop",
        "A parcel",
        "The invoice",
    ];
    let verbs = [
        "arrived late",
        "was approved",
        "needs a refund",
        "was shipped",
        "looks wrong",
    ];
    let tails = [
        "yesterday.",
        "after the update.",
        "in Berlin.",
        "this morning.",
        "again.",
    ];
    let sentences: Vec<String> = (0..1_000)
        .map(|i| {
            format!(
                "{} {} {} ({i})",
                subjects[i % 5],
                verbs[(i / 5) % 5],
                tails[(i / 25) % 5]
            )
        })
        .collect();
    model.embed(&sentences[..8]).await.expect("warm up");
    let started = Instant::now();
    model.embed(&sentences).await.expect("embed");
    let batched = started.elapsed();
    let one = &sentences[..100];
    let started = Instant::now();
    for s in one {
        model.embed(std::slice::from_ref(s)).await.expect("embed");
    }
    let single = started.elapsed();
    let per_batched = batched.as_secs_f64() / sentences.len() as f64;
    let per_single = single.as_secs_f64() / one.len() as f64;
    println!(
        "memory_store: local all-MiniLM-L6-v2: {:.0} sentences/s batched (1,000 in one call), {:.0} sentences/s one at a time",
        1.0 / per_batched,
        1.0 / per_single
    );
    println!(
        "RATIO memory_embed_batched_vs_one_by_one {:.4}",
        per_batched / per_single
    );
}

#[tokio::main]
async fn main() {
    let n = std::env::var("SOORMA_BENCH_MEMORY_DOCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    store_and_rebuild(n).await;
    embedding_throughput().await;
}
