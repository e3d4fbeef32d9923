//! The batch queue's durable half: batches and their tasks in sled, in their
//! own database under the node's data directory (`batches/`), so a restart of
//! the consumer's node, `kill -9` included, finds every batch where it was.
//!
//! The queue writes through this store before it acts on a change that must
//! survive (a task handed to a host, a task's results landed); everything
//! else it keeps in memory and can rebuild from here.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::consumer::batch::codec::{self, CodecError};
use crate::consumer::batch::record::{BatchRecord, TaskRecord};
use crate::model::ids::BatchId;

/// Why the batch store failed.
#[derive(Debug, thiserror::Error)]
pub enum BatchStoreError {
    #[error("cannot open the batch store {path}: {source}")]
    Open { path: PathBuf, source: sled::Error },
    #[error("batch store: {0}")]
    Sled(#[from] sled::Error),
    #[error("batch store: {0}")]
    Codec(#[from] CodecError),
    #[error(
        "the batch store {path} was written by a newer Gleaner (schema {found}; this one reads up to {supported})"
    )]
    Newer {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
}

/// The batch database, opened at the first write when it is not on disk
/// yet: a node that never submits a batch (most volunteers' hosts) never
/// opens it, which spares it a sled database (~1.2 MiB of anonymous memory
/// measured on sled 0.34.7 alone, and a flusher thread).
#[derive(Clone)]
pub struct BatchStore {
    dir: PathBuf,
    opened: Arc<Mutex<Option<Opened>>>,
}

/// The database's handles, once open.
#[derive(Clone)]
struct Opened {
    db: sled::Db,
    batches: sled::Tree,
    tasks: sled::Tree,
}

/// Small: the queue keeps its working set in memory; sled's cache only
/// speeds reads at start.
const CACHE_BYTES: u64 = 16 * 1024 * 1024;

impl BatchStore {
    /// Opens the store in `dir` if one is there; otherwise it is opened
    /// (created) by the first write.
    pub fn open(dir: &Path) -> Result<Self, BatchStoreError> {
        let store = BatchStore {
            dir: dir.to_path_buf(),
            opened: Arc::new(Mutex::new(None)),
        };
        if on_disk(dir) {
            store.opened()?;
        }
        Ok(store)
    }

    /// Whether the database is open (it is once anything was written).
    pub fn is_open(&self) -> bool {
        self.opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The database's handles, opening it first if it is not open. One
    /// lock, so two first writes do not both open it (sled refuses a second
    /// open of the same files).
    fn opened(&self) -> Result<Opened, BatchStoreError> {
        let mut opened = self.opened.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(o) = opened.as_ref() {
            return Ok(o.clone());
        }
        let o = Self::open_db(&self.dir)?;
        *opened = Some(o.clone());
        Ok(o)
    }

    fn open_db(dir: &Path) -> Result<Opened, BatchStoreError> {
        let config = sled::Config::new()
            .path(dir)
            .cache_capacity(CACHE_BYTES)
            .flush_every_ms(Some(200));
        let db = crate::sled_open::open_with_lock_retry(&config).map_err(|source| {
            BatchStoreError::Open {
                path: dir.to_path_buf(),
                source,
            }
        })?;
        let batches = db.open_tree("batches")?;
        let tasks = db.open_tree("tasks")?;
        let opened = Opened { db, batches, tasks };
        opened.upgrade(dir)?;
        Ok(opened)
    }
}

/// Whether a sled database was ever created in `dir`.
fn on_disk(dir: &Path) -> bool {
    dir.join("conf").exists() || dir.join("db").exists()
}

impl Opened {
    /// Brings an older store to [`codec::SCHEMA_VERSION`] in place, and
    /// refuses a newer one rather than misread it. Each record is rewritten
    /// on its own; the version is written last, so an upgrade cut short is
    /// finished by the next open (the upgrade reads both layouts).
    fn upgrade(&self, dir: &Path) -> Result<(), BatchStoreError> {
        let meta = self.db.open_tree("meta")?;
        let found = match meta.get(codec::SCHEMA_KEY)? {
            Some(bytes) => codec::decode_schema(&bytes)?,
            None => 1,
        };
        if found > codec::SCHEMA_VERSION {
            return Err(BatchStoreError::Newer {
                path: dir.to_path_buf(),
                found,
                supported: codec::SCHEMA_VERSION,
            });
        }
        if found < codec::SCHEMA_VERSION {
            let mut upgraded = 0usize;
            for item in self.batches.iter() {
                let (key, value) = item?;
                // A record that reads in neither layout is left for `load`
                // to report.
                if let Ok(record) = codec::upgrade_batch(&value) {
                    self.batches.insert(key, codec::encode_batch(&record)?)?;
                    upgraded += 1;
                }
            }
            for item in self.tasks.iter() {
                let (key, value) = item?;
                if let Ok(record) = codec::upgrade_task(&value) {
                    self.tasks.insert(key, codec::encode_task(&record)?)?;
                    upgraded += 1;
                }
            }
            self.db.flush()?;
            meta.insert(
                codec::SCHEMA_KEY,
                &codec::encode_schema(codec::SCHEMA_VERSION)[..],
            )?;
            self.db.flush()?;
            if upgraded > 0 {
                tracing::info!(
                    from = found,
                    to = codec::SCHEMA_VERSION,
                    records = upgraded,
                    "batch store upgraded"
                );
            }
        }
        Ok(())
    }
}

impl BatchStore {
    /// Stores a new batch and all its tasks at once, durably.
    pub fn create(&self, batch: &BatchRecord, tasks: &[TaskRecord]) -> Result<(), BatchStoreError> {
        let o = self.opened()?;
        let mut writes = sled::Batch::default();
        for (i, task) in tasks.iter().enumerate() {
            writes.insert(
                &codec::task_key(batch.id, i as u32)[..],
                codec::encode_task(task)?,
            );
        }
        o.tasks.apply_batch(writes)?;
        // The batch record last: a batch without it is ignored (and removed)
        // at load, so a crash in between leaves no half batch.
        o.batches
            .insert(codec::batch_key(batch.id), codec::encode_batch(batch)?)?;
        o.db.flush()?;
        Ok(())
    }

    pub fn put_batch(&self, batch: &BatchRecord) -> Result<(), BatchStoreError> {
        self.opened()?
            .batches
            .insert(codec::batch_key(batch.id), codec::encode_batch(batch)?)?;
        Ok(())
    }

    pub fn put_task(
        &self,
        id: BatchId,
        task: u32,
        record: &TaskRecord,
    ) -> Result<(), BatchStoreError> {
        self.opened()?
            .tasks
            .insert(codec::task_key(id, task), codec::encode_task(record)?)?;
        Ok(())
    }

    /// Forgets a batch: its record first (so a crash midway leaves tasks
    /// without a batch, which `load` removes), then its tasks.
    pub fn remove(&self, id: BatchId, tasks: u32) -> Result<(), BatchStoreError> {
        let o = self.opened()?;
        o.batches.remove(codec::batch_key(id))?;
        let mut writes = sled::Batch::default();
        for task in 0..tasks {
            writes.remove(&codec::task_key(id, task)[..]);
        }
        o.tasks.apply_batch(writes)?;
        Ok(())
    }

    /// Another tree of the same database, for records kept beside the
    /// batches (each batch's verification, the hosts' reputation): their
    /// writes are flushed with the batches'. Opens the database.
    pub fn tree(&self, name: &str) -> Result<sled::Tree, BatchStoreError> {
        Ok(self.opened()?.db.open_tree(name)?)
    }

    /// Makes every write so far durable (an fsync; call it off the loop).
    /// Nothing to do while nothing was written.
    pub fn flush(&self) -> Result<(), BatchStoreError> {
        let opened = self
            .opened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(o) = opened {
            o.db.flush()?;
        }
        Ok(())
    }

    /// Every batch with its tasks, oldest first. Tasks of a batch whose record
    /// is missing (a crash during `create`) are removed; a record that does
    /// not decode is reported and skipped, never fatal.
    #[allow(clippy::type_complexity)]
    pub fn load(
        &self,
    ) -> Result<(Vec<(BatchRecord, Vec<TaskRecord>)>, Vec<String>), BatchStoreError> {
        let mut out = Vec::new();
        let mut problems = Vec::new();
        if !self.is_open() {
            // Never written: nothing to load, and nothing to open for it.
            return Ok((out, problems));
        }
        let o = self.opened()?;
        for item in o.batches.iter() {
            let (key, value) = item?;
            match codec::decode_batch(&value) {
                Ok(batch) => out.push((batch, Vec::new())),
                Err(e) => problems.push(format!("batch key {key:?}: {e}")),
            }
        }
        let mut orphans = Vec::new();
        for item in o.tasks.iter() {
            let (key, value) = item?;
            let (id, index) = match codec::decode_task_key(&key) {
                Ok(k) => k,
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            };
            let Some((batch, tasks)) = out.iter_mut().find(|(b, _)| b.id == id) else {
                orphans.push(key);
                continue;
            };
            match codec::decode_task(&value) {
                Ok(task) if index as usize == tasks.len() => tasks.push(task),
                Ok(_) => problems.push(format!("batch {id}: task {index} out of order")),
                Err(e) => problems.push(format!("batch {}: task {index}: {e}", batch.id)),
            }
        }
        for key in orphans {
            o.tasks.remove(key)?;
        }
        // A batch whose tasks did not all load cannot be run safely as is.
        out.retain(|(b, tasks)| {
            let whole = tasks.len() == b.task_count as usize;
            if !whole {
                problems.push(format!(
                    "batch {}: {} of {} tasks readable; the batch is skipped",
                    b.id,
                    tasks.len(),
                    b.task_count
                ));
            }
            whole
        });
        Ok((out, problems))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::batch::policy::PolicyName;
    use crate::consumer::batch::record::{CheckpointSpec, TaskState};

    fn batch(id: u64, tasks: u32) -> BatchRecord {
        BatchRecord {
            id: BatchId::new(id),
            name: Some("sweep".into()),
            created_unix: 1,
            command: vec!["echo".into(), "{}".into()],
            mem_mib: 10,
            runtime_secs: 60,
            limit_secs: 120,
            outputs: vec![],
            output_dir: None,
            max_running: None,
            task_count: tasks,
            cancelled: false,
            policy: PolicyName::Tr,
            deadline_unix: Some(99),
            checkpoint: Some(CheckpointSpec {
                path: "state".into(),
                cost_secs: 3,
            }),
            image: None,
        }
    }

    #[test]
    fn batches_and_tasks_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = BatchStore::open(dir.path()).unwrap();
            let tasks: Vec<_> = (0..3)
                .map(|i| TaskRecord::queued(vec!["echo".into(), i.to_string()], vec![], vec![]))
                .collect();
            store.create(&batch(7, 3), &tasks).unwrap();
            let mut t = tasks[1].clone();
            t.state = TaskState::Done;
            store.put_task(BatchId::new(7), 1, &t).unwrap();
            store.flush().unwrap();
        }
        let store = BatchStore::open(dir.path()).unwrap();
        let (loaded, problems) = store.load().unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].1.len(), 3);
        assert_eq!(loaded[0].1[1].state, TaskState::Done);
        assert_eq!(loaded[0].1[2].argv[1], "2");
    }

    #[test]
    fn tasks_without_their_batch_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = BatchStore::open(dir.path()).unwrap();
        let t = TaskRecord::queued(vec!["x".into()], vec![], vec![]);
        store.put_task(BatchId::new(3), 0, &t).unwrap();
        let (loaded, _) = store.load().unwrap();
        assert!(loaded.is_empty());
        assert_eq!(store.opened().unwrap().tasks.len(), 0);
    }

    #[test]
    fn a_store_never_written_is_never_opened_and_opens_at_its_first_batch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let store = BatchStore::open(&path).unwrap();
        let (loaded, problems) = store.load().unwrap();
        assert!(loaded.is_empty() && problems.is_empty());
        store.flush().unwrap();
        assert!(!store.is_open());
        assert!(!on_disk(&path), "no sled database was made");

        let tasks = vec![TaskRecord::queued(vec!["x".into()], vec![], vec![])];
        store.create(&batch(5, 1), &tasks).unwrap();
        assert!(store.is_open());
        drop(store);
        let store = BatchStore::open(&path).unwrap();
        assert!(store.is_open(), "a store on disk opens at once");
        assert_eq!(store.load().unwrap().0.len(), 1);
    }
}

#[cfg(test)]
mod upgrade_tests {
    //! Stores written by schema 1 (before policies, deadlines, checkpoints
    //! and copies), laid out here field by field as that version wrote them.
    use super::*;
    use crate::consumer::batch::policy::PolicyName;
    use crate::consumer::batch::record::TaskState;
    use crate::model::ids::JobId;
    use serde::Serialize;

    #[derive(Serialize)]
    struct BatchV1 {
        id: BatchId,
        name: Option<String>,
        created_unix: i64,
        command: Vec<String>,
        mem_mib: u64,
        runtime_secs: u64,
        limit_secs: u64,
        outputs: Vec<String>,
        output_dir: Option<PathBuf>,
        max_running: Option<u32>,
        task_count: u32,
        cancelled: bool,
    }

    #[derive(Serialize)]
    struct TaskV1 {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        inputs: Vec<(PathBuf, String)>,
        state: TaskState,
        attempts: u32,
        host: Option<String>,
        job_id: Option<JobId>,
        avoid: Vec<String>,
        exit_status: Option<i32>,
        started_unix: Option<i64>,
        ended_unix: Option<i64>,
        reason: Option<String>,
        wall_secs: Option<f64>,
    }

    fn bytes<T: Serialize>(v: &T) -> Vec<u8> {
        bincode::serde::encode_to_vec(v, bincode::config::standard()).unwrap()
    }

    fn write_v1_store(dir: &Path, tasks: u32) {
        let db = crate::sled_open::open_dir(dir).unwrap();
        let id = BatchId::new(1_700_000_000_000);
        db.open_tree("batches")
            .unwrap()
            .insert(
                codec::batch_key(id),
                bytes(&BatchV1 {
                    id,
                    name: Some("old".into()),
                    created_unix: 5,
                    command: vec!["echo".into()],
                    mem_mib: 64,
                    runtime_secs: 60,
                    limit_secs: 600,
                    outputs: vec!["out".into()],
                    output_dir: None,
                    max_running: Some(2),
                    task_count: tasks,
                    cancelled: false,
                }),
            )
            .unwrap();
        let t = db.open_tree("tasks").unwrap();
        for i in 0..tasks {
            t.insert(
                codec::task_key(id, i),
                bytes(&TaskV1 {
                    argv: vec!["echo".into(), i.to_string()],
                    env: vec![],
                    inputs: vec![],
                    state: TaskState::Done,
                    attempts: 1,
                    host: Some("12D3KooW".into()),
                    job_id: None,
                    avoid: vec![],
                    exit_status: Some(0),
                    started_unix: Some(7),
                    ended_unix: Some(9),
                    reason: None,
                    wall_secs: Some(2.5),
                }),
            )
            .unwrap();
        }
        db.flush().unwrap();
    }

    #[test]
    fn a_schema_1_store_is_upgraded_at_open_and_keeps_every_task() {
        let dir = tempfile::tempdir().unwrap();
        write_v1_store(dir.path(), 3);
        let store = BatchStore::open(dir.path()).unwrap();
        let (loaded, problems) = store.load().unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let (batch, tasks) = &loaded[0];
        assert_eq!(batch.name.as_deref(), Some("old"));
        assert_eq!(batch.max_running, Some(2));
        assert_eq!(
            batch.policy,
            PolicyName::Tr,
            "old batches keep TR placement"
        );
        assert_eq!(batch.checkpoint, None);
        assert_eq!(tasks.len(), 3);
        assert_eq!(tasks[2].argv[1], "2");
        assert_eq!(tasks[1].wall_secs, Some(2.5));
        assert!(tasks[0].copies.is_empty());
        drop((store, loaded));
        // Reopened, it is a current store and reads the same.
        let again = BatchStore::open(dir.path()).unwrap();
        assert_eq!(again.load().unwrap().0[0].1.len(), 3);
    }

    #[test]
    fn an_upgrade_cut_short_is_finished_by_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        write_v1_store(dir.path(), 2);
        {
            // Task 0 already rewritten, the version not yet.
            let db = crate::sled_open::open_dir(dir.path()).unwrap();
            let tasks = db.open_tree("tasks").unwrap();
            let key = codec::task_key(BatchId::new(1_700_000_000_000), 0);
            let v1 = tasks.get(key).unwrap().unwrap();
            let current = codec::encode_task(&codec::upgrade_task(&v1).unwrap()).unwrap();
            tasks.insert(key, current).unwrap();
            db.flush().unwrap();
        }
        let store = BatchStore::open(dir.path()).unwrap();
        let (loaded, problems) = store.load().unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(loaded[0].1.len(), 2);
    }

    /// A task record as schema 2 wrote it (before owner kills were counted).
    #[derive(Serialize)]
    struct TaskV2 {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        inputs: Vec<(PathBuf, String)>,
        state: TaskState,
        attempts: u32,
        host: Option<String>,
        job_id: Option<JobId>,
        avoid: Vec<String>,
        exit_status: Option<i32>,
        started_unix: Option<i64>,
        ended_unix: Option<i64>,
        reason: Option<String>,
        wall_secs: Option<f64>,
        cpu_secs: Option<f64>,
        host_gamma: Option<f64>,
        checkpoint: Option<crate::consumer::batch::record::CheckpointRef>,
        copies: Vec<crate::consumer::batch::record::TaskCopy>,
    }

    #[test]
    fn a_schema_2_store_is_upgraded_with_no_owner_kills_counted() {
        let dir = tempfile::tempdir().unwrap();
        write_v1_store(dir.path(), 1);
        {
            // The same store as schema 2 left it: task 0 in its layout.
            let db = crate::sled_open::open_dir(dir.path()).unwrap();
            let key = codec::task_key(BatchId::new(1_700_000_000_000), 0);
            let v2 = TaskV2 {
                argv: vec!["echo".into()],
                env: vec![],
                inputs: vec![],
                state: TaskState::Queued,
                attempts: 2,
                host: None,
                job_id: None,
                avoid: vec!["12D3KooW".into()],
                exit_status: None,
                started_unix: None,
                ended_unix: None,
                reason: Some("killed: S3".into()),
                wall_secs: None,
                cpu_secs: Some(1.5),
                host_gamma: None,
                checkpoint: None,
                copies: vec![],
            };
            db.open_tree("tasks")
                .unwrap()
                .insert(key, bytes(&v2))
                .unwrap();
            db.open_tree("meta")
                .unwrap()
                .insert(codec::SCHEMA_KEY, &codec::encode_schema(2)[..])
                .unwrap();
            db.flush().unwrap();
        }
        let store = BatchStore::open(dir.path()).unwrap();
        let (loaded, problems) = store.load().unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let t = &loaded[0].1[0];
        assert_eq!((t.attempts, t.owner_kills), (2, 0));
        assert_eq!(t.avoid, vec!["12D3KooW".to_string()]);
        assert_eq!(t.cpu_secs, Some(1.5));
    }

    /// A batch record as schemas 2 and 3 wrote it (before images).
    #[derive(Serialize)]
    struct BatchV3 {
        id: BatchId,
        name: Option<String>,
        created_unix: i64,
        command: Vec<String>,
        mem_mib: u64,
        runtime_secs: u64,
        limit_secs: u64,
        outputs: Vec<String>,
        output_dir: Option<PathBuf>,
        max_running: Option<u32>,
        task_count: u32,
        cancelled: bool,
        policy: PolicyName,
        deadline_unix: Option<i64>,
        checkpoint: Option<crate::consumer::batch::record::CheckpointSpec>,
    }

    #[test]
    fn a_schema_3_store_is_upgraded_with_no_image() {
        let dir = tempfile::tempdir().unwrap();
        write_v1_store(dir.path(), 1);
        {
            // The same store as schema 3 left it: the batch in its layout.
            let db = crate::sled_open::open_dir(dir.path()).unwrap();
            let id = BatchId::new(1_700_000_000_000);
            let v3 = BatchV3 {
                id,
                name: Some("before images".into()),
                created_unix: 5,
                command: vec!["echo".into()],
                mem_mib: 64,
                runtime_secs: 60,
                limit_secs: 600,
                outputs: vec![],
                output_dir: None,
                max_running: None,
                task_count: 1,
                cancelled: false,
                policy: PolicyName::Power,
                deadline_unix: Some(77),
                checkpoint: None,
            };
            db.open_tree("batches")
                .unwrap()
                .insert(codec::batch_key(id), bytes(&v3))
                .unwrap();
            db.open_tree("meta")
                .unwrap()
                .insert(codec::SCHEMA_KEY, &codec::encode_schema(3)[..])
                .unwrap();
            db.flush().unwrap();
        }
        let store = BatchStore::open(dir.path()).unwrap();
        let (loaded, problems) = store.load().unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let b = &loaded[0].0;
        assert_eq!(b.name.as_deref(), Some("before images"));
        assert_eq!((b.policy, b.deadline_unix), (PolicyName::Power, Some(77)));
        assert_eq!(b.image, None);
        // A current record with an image reads back as written.
        let mut with = b.clone();
        with.image = Some(crate::consumer::batch::record::BatchImage {
            local: "/srv/image.tar".into(),
            id: [7; 32],
        });
        let round = codec::upgrade_batch(&codec::encode_batch(&with).unwrap()).unwrap();
        assert_eq!(round, with);
    }

    #[test]
    fn a_store_from_a_newer_version_is_refused_not_misread() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = crate::sled_open::open_dir(dir.path()).unwrap();
            db.open_tree("meta")
                .unwrap()
                .insert(codec::SCHEMA_KEY, &codec::encode_schema(99)[..])
                .unwrap();
            db.flush().unwrap();
        }
        let err = BatchStore::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("schema 99"), "{err}");
    }
}
