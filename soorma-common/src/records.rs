//! Persisted records: tasks, sub-tasks, plans and sessions.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Topic;

/// Where a task stands.
///
/// ```
/// use soorma_common::TaskStatus;
/// assert!(TaskStatus::Completed.is_terminal());
/// assert!(!TaskStatus::Running.is_terminal());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TaskStatus {
    /// Received, handler running.
    #[default]
    Running,
    /// Waiting for delegated sub-tasks.
    Waiting,
    /// Completed; the reply was published.
    Completed,
    /// Failed; the error reply was published.
    Failed,
    /// Canceled ([`CANCEL_REQUESTED`](crate::events::CANCEL_REQUESTED)): no reply is published,
    /// and late sub-task results change nothing.
    Canceled,
}

impl TaskStatus {
    /// Whether the task has ended.
    ///
    /// ```
    /// assert!(soorma_common::TaskStatus::Failed.is_terminal());
    /// ```
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Canceled
        )
    }
}

/// Where a delegated sub-task stands.
///
/// ```
/// use soorma_common::SubTaskStatus;
/// assert_eq!(serde_json::to_string(&SubTaskStatus::Pending).unwrap(), "\"pending\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SubTaskStatus {
    /// Published, no result yet.
    #[default]
    Pending,
    /// Replied with success.
    Completed,
    /// Replied with an error.
    Failed,
}

/// A sub-task delegated by a task, with its result once it arrives.
///
/// Not stored as such: it is assembled from its group's [`DelegationGroup`] record (what was
/// delegated) and the [`ResultChunk`]s its parent's [`SubTaskGroup`] lists (the results), see
/// [`DelegationGroup::sub_tasks`].
///
/// ```
/// use soorma_common::SubTaskInfo;
/// let s = SubTaskInfo::new("sub-1", "sentiment.analyze", "sentiment.completed", 0)
///     .with_parent("task-1", "group-1");
/// assert_eq!(s.parent_task_id, "task-1");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SubTaskInfo {
    /// Sub-task id; the correlation id of its request and reply.
    pub sub_task_id: String,
    /// The task that delegated it.
    #[serde(default)]
    pub parent_task_id: String,
    /// The event type of the request.
    pub event_type: String,
    /// The reply event the sub-task answers with.
    pub response_event: String,
    /// Where it stands.
    #[serde(default)]
    pub status: SubTaskStatus,
    /// The delegation group it belongs to (a fan-out, or a single delegation).
    #[serde(default)]
    pub group_id: String,
    /// Delegation order within the task.
    #[serde(default)]
    pub seq: u32,
    /// The result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl SubTaskInfo {
    /// A pending sub-task.
    ///
    /// ```
    /// # use soorma_common::{SubTaskInfo, SubTaskStatus};
    /// assert_eq!(SubTaskInfo::new("a", "b", "c", 1).status, SubTaskStatus::Pending);
    /// ```
    pub fn new(
        sub_task_id: impl Into<String>,
        event_type: impl Into<String>,
        response_event: impl Into<String>,
        seq: u32,
    ) -> Self {
        Self {
            sub_task_id: sub_task_id.into(),
            parent_task_id: String::new(),
            event_type: event_type.into(),
            response_event: response_event.into(),
            status: SubTaskStatus::Pending,
            group_id: String::new(),
            seq,
            result: None,
            error: None,
        }
    }

    /// Sets the parent task and the delegation group.
    ///
    /// ```
    /// # use soorma_common::SubTaskInfo;
    /// assert_eq!(SubTaskInfo::new("a", "b", "c", 0).with_parent("t", "g").group_id, "g");
    /// ```
    #[must_use]
    pub fn with_parent(
        mut self,
        parent_task_id: impl Into<String>,
        group_id: impl Into<String>,
    ) -> Self {
        self.parent_task_id = parent_task_id.into();
        self.group_id = group_id.into();
        self
    }

    /// Whether a result (success or failure) has arrived.
    ///
    /// ```
    /// # use soorma_common::SubTaskInfo;
    /// assert!(!SubTaskInfo::new("a", "b", "c", 0).is_finished());
    /// ```
    pub fn is_finished(&self) -> bool {
        self.status != SubTaskStatus::Pending
    }
}

/// Progress of one delegation group (a fan-out, or a single delegation) inside its task:
/// which of its sub-tasks have a result, as a compact bitset.
///
/// ```
/// use soorma_common::SubTaskGroup;
/// let mut g = SubTaskGroup::new("g", 10, 3);
/// assert!(g.mark_finished(11));
/// assert!(!g.mark_finished(11), "recording twice changes nothing");
/// assert_eq!(g.finished, 1);
/// assert!(!g.is_complete());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SubTaskGroup {
    /// Group id.
    pub group_id: String,
    /// Sequence number of the group's first sub-task.
    pub first_seq: u32,
    /// Number of sub-tasks.
    pub size: u32,
    /// How many have a result.
    #[serde(default)]
    pub finished: u32,
    /// Which have a result: hex bitset, bit `seq - first_seq`, least significant bit first.
    #[serde(default)]
    pub finished_bits: String,
    /// For a typed fan-out: the request events of the fan-out, comma-separated, in order —
    /// the key of the `#[on_fan_in]` handler that receives the group's replies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_in: Option<String>,
    /// The ids of the [`ResultChunk`]s holding the group's results, in the order they were
    /// recorded (chunk `c` is stored at `<group id>-<c>` in the `subtasks` bucket). For each
    /// sub-task, the first listed chunk that has it holds its result. A run of chunks may be
    /// replaced, in place, by the chunks a merge of their results wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<String>,
    /// The id of the result event that completed the group: the result whose handler runs
    /// what follows the group (a fan-in), and whose redelivery runs it again (no other event
    /// does, not even another event of the same sub-task, such as a human-input timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_by: Option<String>,
}

impl SubTaskGroup {
    /// A group of `size` sub-tasks starting at `first_seq`, none finished.
    ///
    /// ```
    /// # use soorma_common::SubTaskGroup;
    /// assert_eq!(SubTaskGroup::new("g", 0, 9).finished_bits.len(), 4);
    /// ```
    pub fn new(group_id: impl Into<String>, first_seq: u32, size: u32) -> Self {
        Self {
            group_id: group_id.into(),
            first_seq,
            size,
            finished: 0,
            finished_bits: "0".repeat((size as usize).div_ceil(8) * 2),
            fan_in: None,
            chunks: Vec::new(),
            completed_by: None,
        }
    }

    /// The same group, awaited by the `#[on_fan_in]` handler with key `fan_in`.
    ///
    /// ```
    /// # use soorma_common::SubTaskGroup;
    /// let g = SubTaskGroup::new("g", 0, 2).with_fan_in("a.requested,b.requested");
    /// assert_eq!(g.fan_in.as_deref(), Some("a.requested,b.requested"));
    /// ```
    #[must_use]
    pub fn with_fan_in(mut self, fan_in: impl Into<String>) -> Self {
        self.fan_in = Some(fan_in.into());
        self
    }

    fn bit(&self, seq: u32) -> Option<(usize, u8)> {
        let i = seq.checked_sub(self.first_seq)?;
        (i < self.size).then(|| ((i / 8) as usize * 2, 1u8 << (i % 8)))
    }

    fn byte(&self, at: usize) -> u8 {
        self.finished_bits
            .get(at..at + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0)
    }

    /// Whether the sub-task with `seq` has a result.
    ///
    /// ```
    /// # use soorma_common::SubTaskGroup;
    /// let mut g = SubTaskGroup::new("g", 0, 2);
    /// g.mark_finished(1);
    /// assert!(g.is_finished(1) && !g.is_finished(0));
    /// ```
    pub fn is_finished(&self, seq: u32) -> bool {
        self.bit(seq)
            .is_some_and(|(at, mask)| self.byte(at) & mask != 0)
    }

    /// Marks the sub-task with `seq` finished; `false` if it already was (or is not in the group).
    ///
    /// ```
    /// # use soorma_common::SubTaskGroup;
    /// assert!(!SubTaskGroup::new("g", 0, 2).mark_finished(5));
    /// ```
    pub fn mark_finished(&mut self, seq: u32) -> bool {
        let Some((at, mask)) = self.bit(seq) else {
            return false;
        };
        let byte = self.byte(at);
        if byte & mask != 0 {
            return false;
        }
        if self.finished_bits.len() < at + 2 {
            self.finished_bits = format!("{:0<width$}", self.finished_bits, width = at + 2);
        }
        self.finished_bits
            .replace_range(at..at + 2, &format!("{:02x}", byte | mask));
        self.finished += 1;
        true
    }

    /// Whether every sub-task of the group has a result.
    ///
    /// ```
    /// # use soorma_common::SubTaskGroup;
    /// let mut g = SubTaskGroup::new("g", 0, 1);
    /// g.mark_finished(0);
    /// assert!(g.is_complete());
    /// ```
    pub fn is_complete(&self) -> bool {
        self.finished >= self.size
    }
}

/// Consecutive members of a delegation group delegating the same event with the same reply
/// event (a group's members are stored run-length encoded: a fan-out of one kind of request
/// is one run however large it is).
///
/// ```
/// use soorma_common::MemberRun;
/// let run = MemberRun::new("add.requested", "add.done", 1000);
/// assert_eq!(run.count, 1000);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct MemberRun {
    /// The event type of the requests.
    pub event_type: String,
    /// The reply event they answer with.
    pub response_event: String,
    /// How many consecutive members.
    pub count: u32,
}

impl MemberRun {
    /// `count` consecutive members delegating `event_type`, answered with `response_event`.
    ///
    /// ```
    /// # use soorma_common::MemberRun;
    /// assert_eq!(MemberRun::new("a", "b", 2).response_event, "b");
    /// ```
    pub fn new(
        event_type: impl Into<String>,
        response_event: impl Into<String>,
        count: u32,
    ) -> Self {
        Self {
            event_type: event_type.into(),
            response_event: response_event.into(),
            count,
        }
    }
}

/// A page of a large delegation group's members, stored at `<group id>-p<n>` (n from 1) in
/// the `subtasks` bucket when the members do not fit in the group record itself.
///
/// ```
/// use soorma_common::{MemberPage, MemberRun};
/// let page = MemberPage { first: 4000, members: vec![MemberRun::new("a", "b", 10)] };
/// assert_eq!(page.member(4009).map(|m| m.event_type.as_str()), Some("a"));
/// assert!(page.member(4010).is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemberPage {
    /// Index (within the group) of the page's first member.
    pub first: u32,
    /// Its members, in order, run-length encoded.
    pub members: Vec<MemberRun>,
}

impl MemberPage {
    /// The member with group index `index`, if this page holds it.
    ///
    /// ```
    /// # use soorma_common::{MemberPage, MemberRun};
    /// let page = MemberPage { first: 0, members: vec![MemberRun::new("a", "b", 1), MemberRun::new("c", "d", 1)] };
    /// assert_eq!(page.member(1).unwrap().event_type, "c");
    /// ```
    pub fn member(&self, index: u32) -> Option<&MemberRun> {
        let mut at = index.checked_sub(self.first)?;
        for run in &self.members {
            if at < run.count {
                return Some(run);
            }
            at -= run.count;
        }
        None
    }

    /// How many members the page holds.
    ///
    /// ```
    /// # use soorma_common::{MemberPage, MemberRun};
    /// assert_eq!(MemberPage { first: 3, members: vec![MemberRun::new("a", "b", 5)] }.len(), 5);
    /// ```
    pub fn len(&self) -> u32 {
        self.members.iter().map(|r| r.count).sum()
    }

    /// Whether the page holds no member.
    ///
    /// ```
    /// # use soorma_common::MemberPage;
    /// assert!(MemberPage { first: 0, members: vec![] }.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A delegation group as its task stored it, once, when it delegated: which task delegated
/// it and what each member (sub-task) delegates. Stored at `<group id>` in the `subtasks`
/// bucket; the sub-task ids are `<group id>-<index>` (index from 0). Members that do not fit
/// in `members` (beyond [`pages`](Self::pages)`[0]`) are in [`MemberPage`] records.
///
/// ```
/// use soorma_common::{DelegationGroup, MemberRun};
/// let (group, pages) = DelegationGroup::paged(
///     "t-g0", "t", 0,
///     (0..3).map(|_| ("add.requested", "add.done")),
///     64 * 1024,
/// );
/// assert!(pages.is_empty());
/// assert_eq!(group.members, [MemberRun::new("add.requested", "add.done", 3)]);
/// assert_eq!(group.sub_task_id(2), "t-g0-2");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct DelegationGroup {
    /// Group id.
    pub group_id: String,
    /// The task that delegated it.
    pub parent_task_id: String,
    /// Sequence number (within the task) of the first member.
    pub first_seq: u32,
    /// Number of members.
    pub size: u32,
    /// The first members, in order, run-length encoded (every member unless `pages` is set).
    pub members: Vec<MemberRun>,
    /// The index of the first member of each further page: page `n` (from 1) starts at
    /// `pages[n - 1]` and is stored at `<group id>-p<n>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pages: Vec<u32>,
}

impl DelegationGroup {
    /// The group record of `members` (event type and reply event of each, in order) and its
    /// further pages, each holding about `page_bytes` of encoded members at most (one member
    /// at least).
    ///
    /// ```
    /// # use soorma_common::DelegationGroup;
    /// let (group, pages) = DelegationGroup::paged("g", "t", 5, (0..4).map(|i| (format!("e{i}"), "r")), 20);
    /// assert_eq!((group.size, group.members.len(), pages.len()), (4, 1, 3));
    /// assert_eq!(group.pages, [1, 2, 3]);
    /// assert_eq!(group.page_of(3), 3);
    /// ```
    pub fn paged<E, R>(
        group_id: impl Into<String>,
        parent_task_id: impl Into<String>,
        first_seq: u32,
        members: impl IntoIterator<Item = (E, R)>,
        page_bytes: usize,
    ) -> (Self, Vec<MemberPage>)
    where
        E: AsRef<str>,
        R: AsRef<str>,
    {
        // Approximate encoded size of a run: its two strings and JSON framing.
        let run_bytes = |e: &str, r: &str| e.len() + r.len() + 64;
        let mut pages = vec![MemberPage {
            first: 0,
            members: Vec::new(),
        }];
        let (mut bytes, mut size) = (0usize, 0u32);
        for (e, r) in members {
            let (e, r) = (e.as_ref(), r.as_ref());
            let page = pages.last_mut().expect("one page at least");
            match page.members.last_mut() {
                Some(run) if run.event_type == e && run.response_event == r => run.count += 1,
                last => {
                    let cost = run_bytes(e, r);
                    if last.is_some() && bytes + cost > page_bytes {
                        pages.push(MemberPage {
                            first: size,
                            members: Vec::new(),
                        });
                        bytes = 0;
                    }
                    bytes += cost;
                    let page = pages.last_mut().expect("one page at least");
                    page.members.push(MemberRun::new(e, r, 1));
                }
            }
            size += 1;
        }
        let mut pages = pages.into_iter();
        let first = pages.next().map(|p| p.members).unwrap_or_default();
        let rest: Vec<MemberPage> = pages.collect();
        let group = Self {
            group_id: group_id.into(),
            parent_task_id: parent_task_id.into(),
            first_seq,
            size,
            members: first,
            pages: rest.iter().map(|p| p.first).collect(),
        };
        (group, rest)
    }

    /// The key (in the `subtasks` bucket) of page `n` (from 1).
    ///
    /// ```
    /// # use soorma_common::DelegationGroup;
    /// let (group, _) = DelegationGroup::paged("t-g0", "t", 0, [("a", "b")], 1024);
    /// assert_eq!(group.page_key(2), "t-g0-p2");
    /// ```
    pub fn page_key(&self, n: usize) -> String {
        format!("{}-p{n}", self.group_id)
    }

    /// The key (in the `subtasks` bucket) of the results chunk `chunk` (an id listed in
    /// [`SubTaskGroup::chunks`]).
    ///
    /// ```
    /// # use soorma_common::DelegationGroup;
    /// let (group, _) = DelegationGroup::paged("t-g0", "t", 0, [("a", "b")], 1024);
    /// assert_eq!(group.chunk_key("r00ff"), "t-g0-r00ff");
    /// ```
    pub fn chunk_key(&self, chunk: &str) -> String {
        format!("{}-{chunk}", self.group_id)
    }

    /// The id of member `index`: the correlation id of its request and reply.
    ///
    /// ```
    /// # use soorma_common::DelegationGroup;
    /// let (group, _) = DelegationGroup::paged("t-g0", "t", 0, [("a", "b")], 1024);
    /// assert_eq!(group.sub_task_id(0), "t-g0-0");
    /// ```
    pub fn sub_task_id(&self, index: u32) -> String {
        format!("{}-{index}", self.group_id)
    }

    /// Which page holds member `index`: 0 for this record, `n` for page `n`.
    ///
    /// ```
    /// # use soorma_common::DelegationGroup;
    /// let (group, _) = DelegationGroup::paged("g", "t", 0, [("a", "b")], 1024);
    /// assert_eq!(group.page_of(0), 0);
    /// ```
    pub fn page_of(&self, index: u32) -> usize {
        self.pages.partition_point(|&first| first <= index)
    }

    /// This record's own members as a page.
    ///
    /// ```
    /// # use soorma_common::DelegationGroup;
    /// let (group, _) = DelegationGroup::paged("g", "t", 0, [("a", "b")], 1024);
    /// assert_eq!(group.first_page().len(), 1);
    /// ```
    pub fn first_page(&self) -> MemberPage {
        MemberPage {
            first: 0,
            members: self.members.clone(),
        }
    }

    /// The group's sub-tasks, in order: the members of `pages` (this record's own first, then
    /// every further page, in order) with the results `chunks` hold (in the order the parent
    /// lists them: for each sub-task the first chunk that has it wins; only those marked
    /// finished in `progress` count). A member missing from `pages` is left out.
    ///
    /// ```
    /// use soorma_common::{ChunkResult, DelegationGroup, ResultChunk, SubTaskGroup, SubTaskStatus};
    /// let (group, _) = DelegationGroup::paged("t-g0", "t", 0, [("a", "a.done"), ("b", "b.done")], 1024);
    /// let mut progress = SubTaskGroup::new("t-g0", 0, 2);
    /// progress.mark_finished(1);
    /// let chunk = ResultChunk { results: vec![ChunkResult::completed(1, serde_json::json!(7))] };
    /// let subs = group.sub_tasks(&progress, &[group.first_page()], &[chunk]);
    /// assert_eq!(subs[0].status, SubTaskStatus::Pending);
    /// assert_eq!(subs[1].result, Some(serde_json::json!(7)));
    /// assert_eq!(subs[1].sub_task_id, "t-g0-1");
    /// ```
    pub fn sub_tasks(
        &self,
        progress: &SubTaskGroup,
        pages: &[MemberPage],
        chunks: &[ResultChunk],
    ) -> Vec<SubTaskInfo> {
        let mut results: BTreeMap<u32, &ChunkResult> = BTreeMap::new();
        for r in chunks.iter().flat_map(|c| &c.results) {
            if progress.is_finished(r.seq) {
                results.entry(r.seq).or_insert(r);
            }
        }
        let mut out = Vec::with_capacity(self.size as usize);
        for page in pages {
            let mut index = page.first;
            for run in &page.members {
                for _ in 0..run.count {
                    if index >= self.size {
                        break;
                    }
                    let seq = self.first_seq + index;
                    let mut info = SubTaskInfo::new(
                        self.sub_task_id(index),
                        &run.event_type,
                        &run.response_event,
                        seq,
                    )
                    .with_parent(&self.parent_task_id, &self.group_id);
                    if let Some(r) = results.get(&seq) {
                        info.status = r.status;
                        info.result.clone_from(&r.result);
                        info.error.clone_from(&r.error);
                    }
                    out.push(info);
                    index += 1;
                }
            }
        }
        out
    }
}

/// One sub-task's result in a [`ResultChunk`].
///
/// ```
/// use soorma_common::{ChunkResult, SubTaskStatus};
/// assert_eq!(ChunkResult::failed(3, "boom").status, SubTaskStatus::Failed);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct ChunkResult {
    /// The sub-task's sequence number within its task.
    pub seq: u32,
    /// Completed or failed.
    pub status: SubTaskStatus,
    /// The result, when completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ChunkResult {
    /// The result of sub-task `seq`, which succeeded.
    ///
    /// ```
    /// # use soorma_common::ChunkResult;
    /// assert_eq!(ChunkResult::completed(0, 1.into()).result, Some(1.into()));
    /// ```
    pub fn completed(seq: u32, result: Value) -> Self {
        Self {
            seq,
            status: SubTaskStatus::Completed,
            result: Some(result),
            error: None,
        }
    }

    /// The error of sub-task `seq`, which failed.
    ///
    /// ```
    /// # use soorma_common::ChunkResult;
    /// assert_eq!(ChunkResult::failed(0, "no").error.as_deref(), Some("no"));
    /// ```
    pub fn failed(seq: u32, error: impl Into<String>) -> Self {
        Self {
            seq,
            status: SubTaskStatus::Failed,
            result: None,
            error: Some(error.into()),
        }
    }
}

/// Results of sub-tasks of one delegation group, recorded together (one write for a batch of
/// results). Stored at `<group id>-<chunk id>` in the `subtasks` bucket, written before the
/// parent task's update that lists it in [`SubTaskGroup::chunks`]; a chunk no group lists
/// (its writer died before the parent was updated) is ignored.
///
/// ```
/// use soorma_common::{ChunkResult, ResultChunk};
/// let chunk = ResultChunk { results: vec![ChunkResult::completed(0, serde_json::json!("hi"))] };
/// let back: ResultChunk = serde_json::from_str(&serde_json::to_string(&chunk).unwrap()).unwrap();
/// assert_eq!(back, chunk);
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ResultChunk {
    /// The results, first recorded first.
    pub results: Vec<ChunkResult>,
}

/// A worker's task, persisted so its completion can happen in a later handler.
///
/// ```
/// use soorma_common::TaskRecord;
/// let t = TaskRecord::new("task-1", "researcher", "research.requested");
/// assert!(t.groups.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct TaskRecord {
    /// Task id (the id of the request event that started it).
    pub task_id: String,
    /// The agent handling the task.
    pub agent: String,
    /// The request's event type.
    pub event_type: String,
    /// The request's payload.
    #[serde(default)]
    pub data: Value,
    /// Correlation id to reply with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Event type to reply with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_event: Option<String>,
    /// Topic to reply on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_topic: Option<Topic>,
    /// Tenant of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// User of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Session of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Plan of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_id: Option<String>,
    /// Goal of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal_id: Option<String>,
    /// Trace id of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Where the task stands.
    #[serde(default)]
    pub status: TaskStatus,
    /// Delegation groups by id: which of their sub-tasks have a result and where the results
    /// are (what each sub-task delegates is in the group's [`DelegationGroup`] record).
    #[serde(default)]
    pub groups: BTreeMap<String, SubTaskGroup>,
    /// Handler-owned state.
    #[serde(default)]
    pub state: Map<String, Value>,
    /// The final result, once completed (`None` when it is stored apart, see
    /// [`result_apart`](Self::result_apart)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Where the final result is stored when it was too large to keep in this record beside the
    /// request (over 256 KiB as JSON, or taking this record past 768 KiB): its key in the
    /// `subtasks` bucket, `<task id>-out<id>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_apart: Option<String>,
    /// The error, once failed (its first KiB, as the reply carries it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the completion / failure reply has been published.
    #[serde(default)]
    pub reply_sent: bool,
    /// The id of the handled event whose write ended the task: the one handler that replies.
    /// Another handler that finds the task ended leaves the reply to it; a redelivery of that
    /// event (its handler may have died between the write and the reply) replies again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
    /// The id of the handled event whose handler stored the task's state last. A redelivered
    /// request that finds its task stored (its first handling died before acknowledging it)
    /// leaves the state alone when a later handler (a result's) stored it since.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_by: Option<String>,
    /// Next delegation sequence number.
    #[serde(default)]
    pub next_seq: u32,
    /// Creation time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Last update time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// When the task fails unless it ended before (RFC 3339), if it has a deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<String>,
    /// The workflow the task runs, if it runs one: where each step stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<crate::WorkflowRun>,
}

impl TaskRecord {
    /// A running task with no delegations.
    ///
    /// ```
    /// # use soorma_common::{TaskRecord, TaskStatus};
    /// assert_eq!(TaskRecord::new("t", "a", "e").status, TaskStatus::Running);
    /// ```
    pub fn new(
        task_id: impl Into<String>,
        agent: impl Into<String>,
        event_type: impl Into<String>,
    ) -> Self {
        Self {
            task_id: task_id.into(),
            agent: agent.into(),
            event_type: event_type.into(),
            data: Value::Null,
            correlation_id: None,
            response_event: None,
            response_topic: None,
            tenant_id: None,
            user_id: None,
            session_id: None,
            plan_id: None,
            goal_id: None,
            trace_id: None,
            status: TaskStatus::Running,
            groups: BTreeMap::new(),
            state: Map::new(),
            result: None,
            result_apart: None,
            error: None,
            reply_sent: false,
            ended_by: None,
            state_by: None,
            next_seq: 0,
            created_at: None,
            updated_at: None,
            deadline_at: None,
            workflow: None,
        }
    }
}

/// Where a plan stands.
///
/// ```
/// use soorma_common::PlanStatus;
/// assert_eq!(serde_json::to_string(&PlanStatus::Paused).unwrap(), "\"paused\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PlanStatus {
    /// Created, not started.
    #[default]
    Pending,
    /// Executing.
    Running,
    /// Paused, waiting for resume or human input.
    Paused,
    /// Finished successfully.
    Completed,
    /// Finished with failure.
    Failed,
}

/// A running plan instance.
///
/// ```
/// use soorma_common::PlanRecord;
/// let p = PlanRecord::new("plan-1", "research.plan", "start");
/// assert_eq!(p.current_state, "start");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PlanRecord {
    /// Plan id.
    pub plan_id: String,
    /// Plan type (names its definition).
    pub plan_type: String,
    /// Current state.
    pub current_state: String,
    /// Where it stands.
    #[serde(default)]
    pub status: PlanStatus,
    /// Goal payload.
    #[serde(default)]
    pub goal_data: Value,
    /// Results by state name.
    #[serde(default)]
    pub results: Map<String, Value>,
    /// Correlation id of the goal request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Event type to reply to the goal with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_event: Option<String>,
    /// Topic to reply on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_topic: Option<Topic>,
    /// Session the plan belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Parent plan for nested plans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_plan_id: Option<String>,
    /// Tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// User.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The planner (agent name) running the plan: other planners on the platform ignore its
    /// events. `None` (records written before it existed): any planner handles them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<String>,
    /// The state machine the plan runs (kept with the plan, so any instance can restore it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<crate::PlanDefinition>,
    /// Working memory of the plan (e.g. `pause_reason`, the awaited human input).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub state: Map<String, Value>,
    /// The final result (completed plans).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error (failed plans).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the reply to the goal was published.
    #[serde(default)]
    pub reply_sent: bool,
    /// The id of the handled event whose write ended the plan: the one handler that replies
    /// to the goal (again, on a redelivery of that event, while the reply is unsent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
    /// How many actions the plan has published (action ids are derived from it).
    #[serde(default)]
    pub actions: u32,
    /// The id of the event that caused the latest transition (a redelivery of it republishes
    /// the current action instead of transitioning twice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_trigger: Option<String>,
    /// The pending action as it was published, kept when the step that published it applied
    /// events kept during a pause: those events are not delivered again, so a redelivery of
    /// the event handled then (the answer, its timer, or the event whose handler resumed the
    /// plan) publishes this copy again, while the plan is still at that action. Otherwise a
    /// redelivery of [`last_trigger`](Self::last_trigger) renders the action again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_action: Option<PublishedAction>,
    /// States entered, in order, with the event that caused each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<PlanStep>,
    /// Events that arrived while the plan was paused, applied on resume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deferred: Vec<crate::EventEnvelope>,
    /// Creation time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Last update time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// An action request a plan published, as published ([`PlanRecord::published_action`]).
///
/// ```
/// use soorma_common::PublishedAction;
/// let a = PublishedAction::new("answer-1", 3, "plan-a2", "sum.requested", "sum.done", serde_json::json!({}));
/// assert_eq!(a.id, "plan-a2");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PublishedAction {
    /// The id of the handled event whose handling published it.
    pub handled_by: String,
    /// How many steps the plan's [`history`](PlanRecord::history) held then (the plan is still
    /// where publishing it left it while that is unchanged).
    pub at_step: u32,
    /// The request's id (`<plan id>-a<n>`).
    pub id: String,
    /// The request's event type.
    pub event_type: String,
    /// The event type of its reply.
    pub response_event: String,
    /// The request's data.
    #[serde(default)]
    pub data: Value,
}

impl PublishedAction {
    /// The action `id` (`event_type`, replied with `response_event`, carrying `data`)
    /// published while handling the event `handled_by`, the plan's history then `at_step`
    /// steps long.
    ///
    /// ```
    /// # use soorma_common::PublishedAction;
    /// let a = PublishedAction::new("e", 2, "p-a1", "x.requested", "x.done", 1.into());
    /// assert_eq!((a.handled_by.as_str(), a.at_step), ("e", 2));
    /// ```
    pub fn new(
        handled_by: impl Into<String>,
        at_step: u32,
        id: impl Into<String>,
        event_type: impl Into<String>,
        response_event: impl Into<String>,
        data: Value,
    ) -> Self {
        Self {
            handled_by: handled_by.into(),
            at_step,
            id: id.into(),
            event_type: event_type.into(),
            response_event: response_event.into(),
            data,
        }
    }
}

/// One state a plan entered.
///
/// ```
/// use soorma_common::PlanStep;
/// let step = PlanStep::new("searching", Some("search.completed".into()), "2026-01-01T00:00:00Z");
/// assert_eq!(step.state, "searching");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct PlanStep {
    /// The state entered.
    pub state: String,
    /// The event type that caused it (`None` for the initial state and default transitions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_event: Option<String>,
    /// When (RFC 3339).
    pub at: String,
}

impl PlanStep {
    /// A step into `state`.
    ///
    /// ```
    /// let s = soorma_common::PlanStep::new("done", None, "2026-01-01T00:00:00Z");
    /// assert!(s.on_event.is_none());
    /// ```
    pub fn new(state: impl Into<String>, on_event: Option<String>, at: impl Into<String>) -> Self {
        Self {
            state: state.into(),
            on_event,
            at: at.into(),
        }
    }
}

impl PlanRecord {
    /// A pending plan in `initial_state`.
    ///
    /// ```
    /// # use soorma_common::{PlanRecord, PlanStatus};
    /// assert_eq!(PlanRecord::new("p", "t", "s").status, PlanStatus::Pending);
    /// ```
    pub fn new(
        plan_id: impl Into<String>,
        plan_type: impl Into<String>,
        initial_state: impl Into<String>,
    ) -> Self {
        Self {
            plan_id: plan_id.into(),
            plan_type: plan_type.into(),
            current_state: initial_state.into(),
            status: PlanStatus::Pending,
            goal_data: Value::Null,
            results: Map::new(),
            correlation_id: None,
            response_event: None,
            response_topic: None,
            session_id: None,
            parent_plan_id: None,
            tenant_id: None,
            user_id: None,
            planner: None,
            definition: None,
            state: Map::new(),
            result: None,
            error: None,
            reply_sent: false,
            ended_by: None,
            actions: 0,
            last_trigger: None,
            published_action: None,
            history: Vec::new(),
            deferred: Vec::new(),
            created_at: None,
            updated_at: None,
        }
    }
}

/// A conversation / session that groups plans.
///
/// ```
/// use soorma_common::SessionRecord;
/// let s = SessionRecord::new("sess-1");
/// assert!(s.plan_ids.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[non_exhaustive]
pub struct SessionRecord {
    /// Session id.
    pub session_id: String,
    /// Tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// User.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Plans started in the session, oldest first (the planner keeps the latest 1,000).
    #[serde(default)]
    pub plan_ids: Vec<String>,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// Creation time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
}

impl SessionRecord {
    /// An empty session.
    ///
    /// ```
    /// # use soorma_common::SessionRecord;
    /// assert_eq!(SessionRecord::new("s").session_id, "s");
    /// ```
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            tenant_id: None,
            user_id: None,
            name: None,
            plan_ids: Vec::new(),
            metadata: Map::new(),
            created_at: None,
        }
    }

    /// Sets the user the session belongs to.
    ///
    /// ```
    /// # use soorma_common::SessionRecord;
    /// assert_eq!(SessionRecord::new("s").with_user_id("ada").user_id.as_deref(), Some("ada"));
    /// ```
    #[must_use]
    pub fn with_user_id(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    /// Sets the display name.
    ///
    /// ```
    /// # use soorma_common::SessionRecord;
    /// assert_eq!(SessionRecord::new("s").with_name("Trip to Lisbon").name.as_deref(), Some("Trip to Lisbon"));
    /// ```
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Adds a metadata entry.
    ///
    /// ```
    /// # use soorma_common::SessionRecord;
    /// let s = SessionRecord::new("s").with_metadata("channel", serde_json::json!("web"));
    /// assert_eq!(s.metadata["channel"], "web");
    /// ```
    #[must_use]
    pub fn with_metadata(mut self, key: impl Into<String>, value: Value) -> Self {
        self.metadata.insert(key.into(), value);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn task_record_round_trips_with_groups() {
        let mut t = TaskRecord::new("t1", "researcher", "research.requested");
        t.data = json!({"topic": "x"});
        t.response_event = Some("research.completed".into());
        t.response_topic = Some(Topic::ActionResults);
        let mut g = SubTaskGroup::new("g", 0, 20);
        for seq in [0, 7, 8, 19] {
            assert!(g.mark_finished(seq));
        }
        t.groups.insert("g".into(), g);
        let v = serde_json::to_value(&t).unwrap();
        let back: TaskRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, t);
        let g = &back.groups["g"];
        assert_eq!(g.finished, 4);
        assert!((0..20).all(|s| g.is_finished(s) == [0, 7, 8, 19].contains(&s)));
    }

    #[test]
    fn group_completes_exactly_when_every_member_finished() {
        let mut g = SubTaskGroup::new("g", 5, 1000);
        for seq in (5..1005).rev() {
            assert!(!g.is_complete());
            assert!(g.mark_finished(seq));
            assert!(!g.mark_finished(seq));
        }
        assert!(g.is_complete());
        assert!(!g.mark_finished(4) && !g.mark_finished(1005));
        let sub = SubTaskInfo::new("s", "a", "b", 3).with_parent("t", "g");
        let v = serde_json::to_value(&sub).unwrap();
        assert_eq!(serde_json::from_value::<SubTaskInfo>(v).unwrap(), sub);
    }

    #[test]
    fn a_large_group_is_paged_under_the_size_limit_and_every_member_is_found() {
        let kinds = [
            ("alpha.requested", "alpha.done"),
            ("bravo.requested", "bravo.done"),
        ];
        let (group, pages) =
            DelegationGroup::paged("t-g0", "t", 7, (0..20_000).map(|i| kinds[i % 2]), 64 * 1024);
        assert_eq!(group.size, 20_000);
        assert!(pages.len() > 10, "{} pages", pages.len());
        assert!(serde_json::to_vec(&group).unwrap().len() <= 64 * 1024);
        for page in &pages {
            assert!(serde_json::to_vec(page).unwrap().len() <= 64 * 1024);
        }
        let mut all = vec![group.first_page()];
        all.extend(pages.iter().cloned());
        for i in 0..20_000u32 {
            let page = &all[group.page_of(i)];
            assert_eq!(page.member(i).unwrap().event_type, kinds[i as usize % 2].0);
        }
        assert!(all.last().unwrap().member(20_000).is_none());
        let subs = group.sub_tasks(&SubTaskGroup::new("t-g0", 7, 20_000), &all, &[]);
        assert_eq!(subs.len(), 20_000);
        assert_eq!(subs[19_999].sub_task_id, "t-g0-19999");
        assert_eq!(
            (subs[19_999].seq, subs[19_999].event_type.as_str()),
            (20_006, "bravo.requested")
        );
    }

    #[test]
    fn each_result_comes_from_the_first_listed_chunk_that_has_it() {
        let (group, _) = DelegationGroup::paged("g", "t", 0, (0..3).map(|_| ("e", "r")), 1024);
        let mut progress = SubTaskGroup::new("g", 0, 3);
        progress.mark_finished(0);
        progress.mark_finished(1);
        let first = ResultChunk {
            results: vec![
                ChunkResult::completed(0, json!("a")),
                ChunkResult::failed(1, "no"),
            ],
        };
        let later = ResultChunk {
            results: vec![
                ChunkResult::completed(1, json!("late")),
                ChunkResult::completed(0, json!("late")),
                // Not marked finished in the task (its update never landed): not a result.
                ChunkResult::completed(2, json!("orphan")),
            ],
        };
        let subs = group.sub_tasks(&progress, &[group.first_page()], &[first, later]);
        assert_eq!(subs[0].result, Some(json!("a")));
        assert_eq!(
            (subs[1].status, subs[1].error.as_deref()),
            (SubTaskStatus::Failed, Some("no"))
        );
        assert_eq!(
            (subs[2].status, &subs[2].result),
            (SubTaskStatus::Pending, &None)
        );
    }

    #[test]
    fn records_tolerate_unknown_fields() {
        let t: TaskRecord = serde_json::from_value(
            json!({"task_id": "t", "agent": "a", "event_type": "e", "new_field": 1}),
        )
        .unwrap();
        assert_eq!(t.status, TaskStatus::Running);
        let p: PlanRecord = serde_json::from_value(
            json!({"plan_id": "p", "plan_type": "t", "current_state": "s", "zzz": []}),
        )
        .unwrap();
        assert_eq!(p.status, PlanStatus::Pending);
        let s: SessionRecord =
            serde_json::from_value(json!({"session_id": "s", "extra": {}})).unwrap();
        assert_eq!(s.session_id, "s");
    }

    #[test]
    fn plan_and_session_round_trip() {
        let mut p = PlanRecord::new("p1", "research.plan", "start");
        p.status = PlanStatus::Paused;
        p.results.insert("search".into(), json!({"items": [1, 2]}));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(serde_json::from_value::<PlanRecord>(v).unwrap(), p);
        let mut s = SessionRecord::new("s1");
        s.plan_ids.push("p1".into());
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(serde_json::from_value::<SessionRecord>(v).unwrap(), s);
    }
}
