//! Delegation groups as stored: one [`DelegationGroup`] record per delegation (what each
//! member delegates; paged when very large), written once by the delegating task, and the
//! [`ResultChunk`](soorma_common::ResultChunk)s its parent's group lists (the results,
//! written by the fan-in coalescer). The sub-task view, [`SubTaskInfo`], is assembled from
//! them; there is no record per sub-task.

use std::sync::Arc;

use soorma_common::{
    DelegationGroup, MemberPage, MemberRun, ResultChunk, SubTaskGroup, SubTaskInfo,
};

use soorma_common::TaskRecord;

use super::{STATE_CONCURRENCY, subtask_key, task_key};
use crate::error::{EngineError, EngineErrorKind, Error, Result};
use crate::platform::Platform;
use crate::spi::state::{self, StateKey};
use crate::util::concurrently;

/// The encoded members a group record (or one of its pages) holds at most, about: well under
/// any store's value limit (NATS: 1 MiB), and what the fan-in's cache of group records
/// assumes.
pub(super) const PAGE_BYTES: usize = 64 * 1024;

/// Stores `group` and its further `pages` (pages first, so that a group record found is
/// complete). A replayed delegation finds them stored already, which is fine.
pub(super) async fn store(
    platform: &Platform,
    tenant: &str,
    group: &DelegationGroup,
    pages: Vec<MemberPage>,
) -> Result<()> {
    let mut records = Vec::with_capacity(pages.len());
    for (n, page) in pages.iter().enumerate() {
        let key = subtask_key(tenant, &group.page_key(n + 1));
        records.push((key, state::encode("sub-task group page", page)?));
    }
    let store = platform.state().clone();
    concurrently(records, STATE_CONCURRENCY, move |(key, bytes)| {
        let store = store.clone();
        async move { create(&*store, &key, bytes).await }
    })
    .await?;
    let key = subtask_key(tenant, &group.group_id);
    create(
        &**platform.state(),
        &key,
        state::encode("sub-task group", group)?,
    )
    .await
}

async fn create(
    store: &dyn crate::spi::state::StateStore,
    key: &StateKey,
    bytes: Vec<u8>,
) -> Result<()> {
    match store.create(key, bytes).await {
        Ok(_) | Err(Error::Conflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The record of group `group_id` of `tenant` (loaded once per process); `missing` is the
/// error when there is none.
pub(super) async fn load(
    platform: &Platform,
    tenant: &str,
    group_id: &str,
    missing: impl FnOnce() -> Error,
) -> Result<Arc<DelegationGroup>> {
    let key = subtask_key(tenant, group_id);
    let store = platform.state().clone();
    platform
        .fan_in()
        .groups
        .get_or_load(key.clone(), async move {
            match state::load::<DelegationGroup>(&*store, "sub-task group", &key).await? {
                // Its key says which group and tenant it is; a record claiming another group
                // is not this one.
                Some(g) if g.value.group_id == key.key => Ok(g.value),
                _ => Err(missing()),
            }
        })
        .await
}

/// Further page `n` (from 1) of `group`, loaded once per process.
async fn page(
    platform: &Platform,
    tenant: &str,
    group: &DelegationGroup,
    n: usize,
) -> Result<Arc<MemberPage>> {
    let key = subtask_key(tenant, &group.page_key(n));
    let store = platform.state().clone();
    platform
        .fan_in()
        .pages
        .get_or_load(key.clone(), async move {
            state::load::<MemberPage>(&*store, "sub-task group page", &key)
                .await?
                .map(|p| p.value)
                .ok_or_else(|| missing_record(&key))
        })
        .await
}

/// Member `index` of `group` (`None` when the group has no such member).
pub(super) async fn member(
    platform: &Platform,
    tenant: &str,
    group: &DelegationGroup,
    index: u32,
) -> Result<Option<MemberRun>> {
    if index >= group.size {
        return Ok(None);
    }
    let found = match group.page_of(index) {
        0 => group.first_page().member(index).cloned(),
        n => page(platform, tenant, group, n)
            .await?
            .member(index)
            .cloned(),
    };
    Ok(found)
}

/// The sub-tasks of the group `progress` (a group of the task, as stored in it), in order;
/// with their results when `with_results` (else as pending, whatever their bits say).
pub(super) async fn sub_tasks(
    platform: &Platform,
    tenant: &str,
    progress: &SubTaskGroup,
    with_results: bool,
) -> Result<Vec<SubTaskInfo>> {
    let group = load(platform, tenant, &progress.group_id, || {
        missing_record(&subtask_key(tenant, &progress.group_id))
    })
    .await?;
    let mut pages = vec![group.first_page()];
    for n in 1..=group.pages.len() {
        pages.push(MemberPage::clone(
            &*page(platform, tenant, &group, n).await?,
        ));
    }
    let chunks = if with_results {
        let keys: Vec<StateKey> = progress
            .chunks
            .iter()
            .map(|c| subtask_key(tenant, &group.chunk_key(c)))
            .collect();
        let store = platform.state().clone();
        concurrently(keys, STATE_CONCURRENCY, move |key: StateKey| {
            let store = store.clone();
            async move {
                state::load::<ResultChunk>(&*store, "sub-task results", &key)
                    .await?
                    .map(|c| c.value)
                    .ok_or_else(|| missing_record(&key))
            }
        })
        .await?
    } else {
        Vec::new()
    };
    Ok(group.sub_tasks(progress, &pages, &chunks))
}

/// The group id and index a sub-task id `<group id>-<index>` names; `None` for anything a
/// delegation does not make (`+1` or `01` would parse as numbers too).
pub(super) fn parse_sub_task_id(sub_task_id: &str) -> Option<(&str, u32)> {
    let (group_id, index) = sub_task_id.rsplit_once('-')?;
    let n: u32 = index.parse().ok()?;
    (!group_id.is_empty() && n.to_string() == index).then_some((group_id, n))
}

/// The sub-task `sub_task_id` of `tenant` as stored: what it delegates and, once recorded,
/// its result; `None` when no task of the tenant delegated it.
pub(crate) async fn stored_sub_task(
    platform: &Platform,
    tenant: &str,
    sub_task_id: &str,
) -> Result<Option<SubTaskInfo>> {
    let Some((group_id, _)) = parse_sub_task_id(sub_task_id) else {
        return Ok(None);
    };
    let group = match load(platform, tenant, group_id, || {
        Error::UnknownSubTask(sub_task_id.to_owned())
    })
    .await
    {
        Ok(group) => group,
        Err(Error::UnknownSubTask(_)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let parent = &group.parent_task_id;
    let Some(task) =
        state::load::<TaskRecord>(&**platform.state(), "task", &task_key(tenant, parent)).await?
    else {
        return Ok(None);
    };
    let Some(progress) = task.value.groups.get(group_id) else {
        return Ok(None);
    };
    let members = sub_tasks(platform, tenant, progress, true).await?;
    Ok(members.into_iter().find(|s| s.sub_task_id == sub_task_id))
}

/// A record another one lists is not stored.
fn missing_record(key: &StateKey) -> Error {
    EngineError::new(EngineErrorKind::Inconsistent, format!("`{key}` is missing")).into()
}
