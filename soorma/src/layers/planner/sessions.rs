//! Sessions (groups of plans) and queries over stored plans.
//!
//! Both are read/write views of the state store, scoped to one tenant: [`Sessions`] creates,
//! reads and lists [`SessionRecord`]s (bucket [`SESSIONS_BUCKET`]); [`Plans`] reads and lists
//! [`PlanRecord`]s (bucket [`PLANS_BUCKET`](super::PLANS_BUCKET)) by session, status, parent
//! plan, plan type or user.
//!
//! A plan started for a goal whose envelope names a session (`Client::with_session`) is added
//! to that session's `plan_ids` — the session is created on first use if nobody created it —
//! so listing a session's plans reads only those plans. Every other listing reads all plan
//! records of the tenant (`keys` + one read per plan, at most 16 at a time): fine for thousands
//! of plans; with more, delete finished plans you no longer need, or keep your own index.

use std::sync::Arc;

use soorma_common::{PlanRecord, PlanStatus, SessionRecord};

use super::context::plan_key;
use crate::error::{Error, Result};
use crate::platform::Platform;
use crate::spi::state::{self, Change, StateKey, StateStore};

impl Platform {
    /// The sessions of the default tenant (`.for_tenant(..)` for another): create, get, list.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::embedded();
    /// platform.sessions().create(soorma::common::SessionRecord::new("chat-1")).await?;
    /// assert_eq!(platform.sessions().list().await?.len(), 1);
    /// # Ok(()) }
    /// ```
    pub fn sessions(&self) -> Sessions {
        Sessions::new(self)
    }

    /// Queries over the stored plans of the default tenant (`.for_tenant(..)` for another): by
    /// id, session, status, parent plan.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let platform = soorma::Platform::embedded();
    /// assert!(platform.plans().get("plan-1").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub fn plans(&self) -> Plans {
        Plans::new(self)
    }
}

/// The state bucket holding session records (`<tenant>.<session id>`).
///
/// ```
/// assert_eq!(soorma::planner::SESSIONS_BUCKET, "sessions");
/// ```
pub const SESSIONS_BUCKET: &str = "sessions";

/// How many records a listing reads at once.
const READ_CONCURRENCY: usize = 16;

pub(crate) fn session_key(tenant: &str, session_id: &str) -> StateKey {
    StateKey::new(SESSIONS_BUCKET, tenant, session_id)
}

/// At most this many plan ids are kept in a session's `plan_ids` (the latest): a session's
/// record stays small enough for one KV value however many goals name it.
pub(crate) const MAX_SESSION_PLANS: usize = 1_000;

/// Adds `plan_id` to the session's `plan_ids` (revision-checked; idempotent), creating the
/// session if it does not exist yet; past [`MAX_SESSION_PLANS`] the oldest id leaves.
pub(crate) async fn add_plan(
    store: &dyn StateStore,
    tenant: &str,
    session_id: &str,
    user_id: Option<&str>,
    plan_id: &str,
) -> Result<()> {
    let key = session_key(tenant, session_id);
    // Create-or-update: a concurrent creator makes `create` conflict, a concurrent delete makes
    // the update miss; either way the next round settles it.
    for _ in 0..8 {
        if state::load::<SessionRecord>(store, "session", &key)
            .await?
            .is_none()
        {
            let mut session = SessionRecord::new(session_id);
            session.tenant_id = Some(tenant.to_owned());
            session.user_id = user_id.map(str::to_owned);
            session.plan_ids.push(plan_id.to_owned());
            session.created_at = Some(crate::util::now_rfc3339());
            match store
                .create(&key, state::encode("session", &session)?)
                .await
            {
                Ok(_) => return Ok(()),
                Err(Error::Conflict { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        let gone = std::sync::atomic::AtomicBool::new(false);
        let updated = state::update_with(
            store,
            "session",
            &key,
            || {
                gone.store(true, std::sync::atomic::Ordering::Relaxed);
                Error::from(crate::error::EngineError::new(
                    crate::error::EngineErrorKind::Inconsistent,
                    format!("session `{session_id}` was deleted meanwhile"),
                ))
            },
            |session: &mut SessionRecord| {
                if session.plan_ids.iter().any(|p| p == plan_id) {
                    return Ok(Change::Keep(()));
                }
                session.plan_ids.push(plan_id.to_owned());
                let over = session.plan_ids.len().saturating_sub(MAX_SESSION_PLANS);
                if over > 0 {
                    session.plan_ids.drain(..over);
                    tracing::debug!(session_id = %session_id, "the session lists its latest {MAX_SESSION_PLANS} plans; the oldest left the list");
                }
                Ok(Change::Write(()))
            },
        )
        .await;
        match updated {
            Ok(_) => return Ok(()),
            Err(_) if gone.load(std::sync::atomic::Ordering::Relaxed) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Error::Conflict {
        key: key.to_string(),
    })
}

/// Loads the records under `keys` (at most [`READ_CONCURRENCY`] reads at once), skipping keys
/// deleted meanwhile and records that do not decode (with a warning).
async fn load_all<T>(
    store: Arc<dyn StateStore>,
    what: &'static str,
    keys: Vec<StateKey>,
) -> Result<Vec<T>>
where
    T: serde::de::DeserializeOwned + Send + 'static,
{
    let loaded = crate::util::concurrently(keys, READ_CONCURRENCY, move |key: StateKey| {
        let store = store.clone();
        async move {
            match state::load::<T>(&*store, what, &key).await {
                Ok(v) => Ok(v.map(|v| v.value)),
                Err(e @ Error::CorruptState { .. }) => {
                    tracing::warn!(error = %e, "skipping a record that does not decode");
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        }
    })
    .await?;
    Ok(loaded.into_iter().flatten().collect())
}

fn sort_plans(plans: &mut [PlanRecord]) {
    plans.sort_by(|a, b| {
        (a.created_at.as_deref(), &a.plan_id).cmp(&(b.created_at.as_deref(), &b.plan_id))
    });
}

/// Sessions of one tenant: a session groups the plans started in it (e.g. one conversation).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use soorma::common::SessionRecord;
///
/// let platform = soorma::Platform::embedded();
/// let sessions = platform.sessions().for_tenant("acme");
/// sessions.create(SessionRecord::new("chat-1").with_user_id("ada").with_name("Trip")).await?;
/// sessions.create(SessionRecord::new("chat-2").with_user_id("bob")).await?;
/// assert_eq!(sessions.get("chat-1").await?.unwrap().name.as_deref(), Some("Trip"));
/// assert_eq!(sessions.list().await?.len(), 2);
/// assert_eq!(sessions.list_for_user("ada").await?[0].session_id, "chat-1");
/// // Other tenants see none of them.
/// assert!(platform.sessions().list().await?.is_empty());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Sessions {
    store: Arc<dyn StateStore>,
    tenant: String,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// The sessions of the default tenant on `platform` (same as [`Platform::sessions`]).
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// let sessions = soorma::planner::Sessions::new(&platform);
    /// assert_eq!(sessions.tenant(), "default");
    /// ```
    pub fn new(platform: &Platform) -> Self {
        Self {
            store: platform.state().clone(),
            tenant: soorma_common::DEFAULT_TENANT.to_owned(),
        }
    }

    /// The same view for `tenant`.
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// assert_eq!(platform.sessions().for_tenant("acme").tenant(), "acme");
    /// ```
    #[must_use]
    pub fn for_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// The tenant this view reads and writes.
    ///
    /// ```
    /// assert_eq!(soorma::Platform::embedded().sessions().tenant(), "default");
    /// ```
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// Creates a session (its `tenant_id` becomes this view's tenant, `created_at` now).
    /// [`Error::Conflict`] if it exists; [`Error::InvalidArgument`] for an empty id or a record
    /// naming another tenant.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::common::SessionRecord;
    ///
    /// let sessions = soorma::Platform::embedded().sessions();
    /// let created = sessions.create(SessionRecord::new("chat-1").with_user_id("ada")).await?;
    /// assert!(created.created_at.is_some());
    /// let again = sessions.create(SessionRecord::new("chat-1")).await;
    /// assert!(matches!(again, Err(soorma::Error::Conflict { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn create(&self, mut session: SessionRecord) -> Result<SessionRecord> {
        if session.session_id.trim().is_empty() {
            return Err(Error::InvalidArgument(
                "a session needs a non-empty session_id".into(),
            ));
        }
        if let Some(other) = session.tenant_id.as_deref().filter(|t| *t != self.tenant) {
            return Err(Error::InvalidArgument(format!(
                "session `{}` names tenant `{other}`, but this view is for tenant `{}`",
                session.session_id, self.tenant
            )));
        }
        session.tenant_id = Some(self.tenant.clone());
        session
            .created_at
            .get_or_insert_with(crate::util::now_rfc3339);
        let key = session_key(&self.tenant, &session.session_id);
        self.store
            .create(&key, state::encode("session", &session)?)
            .await?;
        Ok(session)
    }

    /// A session by id.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let sessions = soorma::Platform::embedded().sessions();
    /// assert!(sessions.get("nope").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, session_id: &str) -> Result<Option<SessionRecord>> {
        let key = session_key(&self.tenant, session_id);
        Ok(state::load(&*self.store, "session", &key)
            .await?
            .map(|v| v.value))
    }

    /// Every session of the tenant, oldest first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::common::SessionRecord;
    ///
    /// let sessions = soorma::Platform::embedded().sessions();
    /// sessions.create(SessionRecord::new("a")).await?;
    /// sessions.create(SessionRecord::new("b")).await?;
    /// let ids: Vec<_> = sessions.list().await?.into_iter().map(|s| s.session_id).collect();
    /// assert_eq!(ids, ["a", "b"]);
    /// # Ok(()) }
    /// ```
    pub async fn list(&self) -> Result<Vec<SessionRecord>> {
        let keys = self
            .store
            .keys(SESSIONS_BUCKET, &self.tenant)
            .await?
            .into_iter()
            .map(|k| session_key(&self.tenant, &k))
            .collect();
        let mut sessions: Vec<SessionRecord> =
            load_all(self.store.clone(), "session", keys).await?;
        sessions.sort_by(|a, b| {
            (a.created_at.as_deref(), &a.session_id).cmp(&(b.created_at.as_deref(), &b.session_id))
        });
        Ok(sessions)
    }

    /// The sessions of one user, oldest first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::common::SessionRecord;
    ///
    /// let sessions = soorma::Platform::embedded().sessions();
    /// sessions.create(SessionRecord::new("a").with_user_id("ada")).await?;
    /// sessions.create(SessionRecord::new("b").with_user_id("bob")).await?;
    /// assert_eq!(sessions.list_for_user("bob").await?[0].session_id, "b");
    /// # Ok(()) }
    /// ```
    pub async fn list_for_user(&self, user_id: &str) -> Result<Vec<SessionRecord>> {
        let mut all = self.list().await?;
        all.retain(|s| s.user_id.as_deref() == Some(user_id));
        Ok(all)
    }

    /// The latest 1,000 plans started in a session (those its `plan_ids` lists), oldest
    /// first; empty for an unknown session.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// let sessions = soorma::Platform::embedded().sessions();
    /// assert!(sessions.plans("chat-1").await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn plans(&self, session_id: &str) -> Result<Vec<PlanRecord>> {
        let Some(session) = self.get(session_id).await? else {
            return Ok(Vec::new());
        };
        let keys = session
            .plan_ids
            .iter()
            .map(|p| plan_key(&self.tenant, p))
            .collect();
        let mut plans: Vec<PlanRecord> = load_all(self.store.clone(), "plan", keys).await?;
        sort_plans(&mut plans);
        Ok(plans)
    }

    /// Deletes a session record (its plans stay). No error if it does not exist.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::common::SessionRecord;
    ///
    /// let sessions = soorma::Platform::embedded().sessions();
    /// sessions.create(SessionRecord::new("a")).await?;
    /// sessions.delete("a").await?;
    /// assert!(sessions.get("a").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self, session_id: &str) -> Result<()> {
        self.store
            .delete(&session_key(&self.tenant, session_id))
            .await
    }
}

/// Which plans [`Plans::list`] returns: every condition set must hold.
///
/// ```
/// use soorma::common::PlanStatus;
/// use soorma::planner::PlanFilter;
///
/// let filter = PlanFilter::new().session("chat-1").status(PlanStatus::Completed);
/// assert_eq!(filter.session_id.as_deref(), Some("chat-1"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanFilter {
    /// Only plans started in this session (read through the session's plan list).
    pub session_id: Option<String>,
    /// Only plans with this status.
    pub status: Option<PlanStatus>,
    /// Only sub-plans of this plan.
    pub parent_plan_id: Option<String>,
    /// Only plans of this type.
    pub plan_type: Option<String>,
    /// Only plans of this user.
    pub user_id: Option<String>,
}

impl PlanFilter {
    /// A filter that matches every plan.
    ///
    /// ```
    /// # use soorma::planner::PlanFilter;
    /// let all = PlanFilter::new();
    /// assert!(all.matches(&soorma::common::PlanRecord::new("p", "t", "s")));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Only plans started in `session_id`.
    ///
    /// ```
    /// # use soorma::planner::PlanFilter;
    /// assert_eq!(PlanFilter::new().session("s").session_id.as_deref(), Some("s"));
    /// ```
    #[must_use]
    pub fn session(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = Some(session_id.into());
        self
    }

    /// Only plans with `status`.
    ///
    /// ```
    /// # use soorma::planner::PlanFilter;
    /// use soorma::common::PlanStatus;
    /// assert_eq!(PlanFilter::new().status(PlanStatus::Failed).status, Some(PlanStatus::Failed));
    /// ```
    #[must_use]
    pub fn status(mut self, status: PlanStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only sub-plans of `parent_plan_id`.
    ///
    /// ```
    /// # use soorma::planner::PlanFilter;
    /// assert_eq!(PlanFilter::new().parent("p").parent_plan_id.as_deref(), Some("p"));
    /// ```
    #[must_use]
    pub fn parent(mut self, parent_plan_id: impl Into<String>) -> Self {
        self.parent_plan_id = Some(parent_plan_id.into());
        self
    }

    /// Only plans of `plan_type`.
    ///
    /// ```
    /// # use soorma::planner::PlanFilter;
    /// assert_eq!(PlanFilter::new().plan_type("research").plan_type.as_deref(), Some("research"));
    /// ```
    #[must_use]
    pub fn plan_type(mut self, plan_type: impl Into<String>) -> Self {
        self.plan_type = Some(plan_type.into());
        self
    }

    /// Only plans of `user_id`.
    ///
    /// ```
    /// # use soorma::planner::PlanFilter;
    /// assert_eq!(PlanFilter::new().user("ada").user_id.as_deref(), Some("ada"));
    /// ```
    #[must_use]
    pub fn user(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    /// Whether `plan` passes every condition.
    ///
    /// ```
    /// use soorma::common::{PlanRecord, PlanStatus};
    /// use soorma::planner::PlanFilter;
    ///
    /// let plan = PlanRecord::new("p", "research", "start"); // pending
    /// assert!(PlanFilter::new().plan_type("research").matches(&plan));
    /// assert!(!PlanFilter::new().status(PlanStatus::Running).matches(&plan));
    /// ```
    pub fn matches(&self, plan: &PlanRecord) -> bool {
        fn same(want: Option<&String>, have: Option<&String>) -> bool {
            want.is_none_or(|w| have == Some(w))
        }
        same(self.session_id.as_ref(), plan.session_id.as_ref())
            && self.status.is_none_or(|s| s == plan.status)
            && same(self.parent_plan_id.as_ref(), plan.parent_plan_id.as_ref())
            && self.plan_type.as_ref().is_none_or(|t| *t == plan.plan_type)
            && same(self.user_id.as_ref(), plan.user_id.as_ref())
    }
}

/// Queries over the stored plans of one tenant.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
/// use std::sync::Arc;
/// use soorma::prelude::*;
/// use soorma::common::{PlanDefinition, PlanStatus, StateConfig};
/// use soorma::planner::PlanFilter;
///
/// async fn goal(goal: GoalContext, plan: State<Arc<Plan>>) -> soorma::Result<()> {
///     goal.start(&plan).await?;
///     Ok(())
/// }
///
/// let plan = Plan::new(PlanDefinition::new("noop", "done at once")
///     .with_state(StateConfig::new("start", "").terminal()))?;
/// let platform = Platform::embedded();
/// let planner = Planner::new("noop-planner").use_registered_handlers(false)
///     .with_state(Arc::new(plan))
///     .handler(Handler::on_goal("noop.goal", goal)).start(&platform).await?;
/// let client = platform.client("docs").with_session("chat-1");
/// client.invoke::<serde_json::Value>("noop.goal", (), "noop.done").await?;
///
/// let plans = platform.plans();
/// let done = plans.by_status(PlanStatus::Completed).await?;
/// assert_eq!(done.len(), 1);
/// assert_eq!(plans.by_session("chat-1").await?[0].plan_id, done[0].plan_id);
/// assert!(plans.get(&done[0].plan_id).await?.is_some());
/// assert!(plans.list(&PlanFilter::new().plan_type("other")).await?.is_empty());
/// # planner.shutdown().await }
/// ```
#[derive(Clone)]
pub struct Plans {
    store: Arc<dyn StateStore>,
    tenant: String,
}

impl std::fmt::Debug for Plans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plans")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

impl Plans {
    /// The plans of the default tenant on `platform` (same as [`Platform::plans`]).
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// assert_eq!(soorma::planner::Plans::new(&platform).tenant(), "default");
    /// ```
    pub fn new(platform: &Platform) -> Self {
        Self {
            store: platform.state().clone(),
            tenant: soorma_common::DEFAULT_TENANT.to_owned(),
        }
    }

    /// The same view for `tenant`.
    ///
    /// ```
    /// let platform = soorma::Platform::embedded();
    /// assert_eq!(platform.plans().for_tenant("acme").tenant(), "acme");
    /// ```
    #[must_use]
    pub fn for_tenant(mut self, tenant: impl Into<String>) -> Self {
        self.tenant = tenant.into();
        self
    }

    /// The tenant this view reads.
    ///
    /// ```
    /// assert_eq!(soorma::Platform::embedded().plans().tenant(), "default");
    /// ```
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// A plan record by id (status, current state, history, results, ...).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// assert!(soorma::Platform::embedded().plans().get("no-such-plan").await?.is_none());
    /// # Ok(()) }
    /// ```
    pub async fn get(&self, plan_id: &str) -> Result<Option<PlanRecord>> {
        let key = plan_key(&self.tenant, plan_id);
        Ok(state::load(&*self.store, "plan", &key)
            .await?
            .map(|v| v.value))
    }

    /// The plans that pass `filter`, oldest first. With a session in the filter only that
    /// session's plans are read; otherwise every plan record of the tenant is.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::planner::PlanFilter;
    /// let plans = soorma::Platform::embedded().plans();
    /// assert!(plans.list(&PlanFilter::new().user("ada")).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn list(&self, filter: &PlanFilter) -> Result<Vec<PlanRecord>> {
        let mut plans = match &filter.session_id {
            Some(session) => {
                Sessions {
                    store: self.store.clone(),
                    tenant: self.tenant.clone(),
                }
                .plans(session)
                .await?
            }
            None => {
                let keys = self
                    .store
                    .keys(super::PLANS_BUCKET, &self.tenant)
                    .await?
                    .into_iter()
                    .map(|k| plan_key(&self.tenant, &k))
                    .collect();
                load_all(self.store.clone(), "plan", keys).await?
            }
        };
        plans.retain(|p| filter.matches(p));
        sort_plans(&mut plans);
        Ok(plans)
    }

    /// The latest 1,000 plans started in a session (those its `plan_ids` lists), oldest
    /// first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// assert!(soorma::Platform::embedded().plans().by_session("chat-1").await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn by_session(&self, session_id: &str) -> Result<Vec<PlanRecord>> {
        self.list(&PlanFilter::new().session(session_id)).await
    }

    /// The plans with `status`, oldest first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// use soorma::common::PlanStatus;
    /// assert!(soorma::Platform::embedded().plans().by_status(PlanStatus::Running).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn by_status(&self, status: PlanStatus) -> Result<Vec<PlanRecord>> {
        self.list(&PlanFilter::new().status(status)).await
    }

    /// The sub-plans a plan started (plans whose `parent_plan_id` is `plan_id`), oldest first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> soorma::Result<()> {
    /// assert!(soorma::Platform::embedded().plans().sub_plans("p").await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn sub_plans(&self, plan_id: &str) -> Result<Vec<PlanRecord>> {
        self.list(&PlanFilter::new().parent(plan_id)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(id: &str, created: &str, status: PlanStatus) -> PlanRecord {
        let mut p = PlanRecord::new(id, "research", "start");
        p.created_at = Some(created.to_owned());
        p.status = status;
        p
    }

    #[tokio::test]
    async fn add_plan_creates_the_session_once_and_keeps_plan_ids_unique() {
        let store = crate::engine::embedded::MemoryStore::new();
        for id in ["p1", "p2", "p1"] {
            add_plan(&store, "acme", "chat", Some("ada"), id)
                .await
                .unwrap();
        }
        let s: SessionRecord = state::load(&store, "session", &session_key("acme", "chat"))
            .await
            .unwrap()
            .unwrap()
            .value;
        assert_eq!(s.plan_ids, ["p1", "p2"]);
        assert_eq!(s.user_id.as_deref(), Some("ada"));
        assert_eq!(s.tenant_id.as_deref(), Some("acme"));
        assert!(s.created_at.is_some());
    }

    #[tokio::test]
    async fn concurrent_adds_lose_no_plan() {
        let store: Arc<dyn StateStore> = Arc::new(crate::engine::embedded::MemoryStore::new());
        let mut set = tokio::task::JoinSet::new();
        for i in 0..32 {
            let store = store.clone();
            set.spawn(async move {
                add_plan(&*store, "t", "s", None, &format!("p{i}"))
                    .await
                    .unwrap();
            });
        }
        while set.join_next().await.is_some() {}
        let s: SessionRecord = state::load(&*store, "session", &session_key("t", "s"))
            .await
            .unwrap()
            .unwrap()
            .value;
        assert_eq!(s.plan_ids.len(), 32);
    }

    #[tokio::test]
    async fn a_session_lists_its_latest_plans_only() {
        let store = crate::engine::embedded::MemoryStore::new();
        for i in 0..MAX_SESSION_PLANS + 5 {
            add_plan(&store, "t", "s", None, &format!("p{i}"))
                .await
                .unwrap();
        }
        let s: SessionRecord = state::load(&store, "session", &session_key("t", "s"))
            .await
            .unwrap()
            .unwrap()
            .value;
        assert_eq!(s.plan_ids.len(), MAX_SESSION_PLANS);
        assert_eq!(s.plan_ids[0], "p5", "the oldest left first");
        assert_eq!(
            s.plan_ids.last().unwrap(),
            &format!("p{}", MAX_SESSION_PLANS + 4)
        );
    }

    #[tokio::test]
    async fn listing_filters_sorts_and_skips_undecodable_records() {
        let platform = Platform::embedded();
        let store = platform.state();
        for p in [
            plan("b", "2026-01-02T00:00:00.000Z", PlanStatus::Completed),
            plan("a", "2026-01-01T00:00:00.000Z", PlanStatus::Completed),
            plan("c", "2026-01-03T00:00:00.000Z", PlanStatus::Running),
        ] {
            store
                .put(
                    &plan_key("default", &p.plan_id),
                    state::encode("plan", &p).unwrap(),
                )
                .await
                .unwrap();
        }
        store
            .put(&plan_key("default", "junk"), b"not json".to_vec())
            .await
            .unwrap();
        let plans = platform.plans();
        let done: Vec<_> = plans
            .by_status(PlanStatus::Completed)
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.plan_id)
            .collect();
        assert_eq!(done, ["a", "b"]);
        assert_eq!(plans.list(&PlanFilter::new()).await.unwrap().len(), 3);
        assert!(
            plans
                .for_tenant("other")
                .list(&PlanFilter::new())
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn create_rejects_another_tenant_and_empty_ids() {
        let sessions = Platform::embedded().sessions().for_tenant("acme");
        let mut foreign = SessionRecord::new("s");
        foreign.tenant_id = Some("globex".into());
        assert!(matches!(
            sessions.create(foreign).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            sessions.create(SessionRecord::new(" ")).await,
            Err(Error::InvalidArgument(_))
        ));
    }
}
