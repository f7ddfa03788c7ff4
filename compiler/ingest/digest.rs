//! Each input's sha256, computed while it is read (the table's metadata
//! records it; content read twice is found by it), never by reading the
//! file a second time.

use std::io::Read;

use sha2::{Digest as _, Sha256};

/// Hashes what passes through it: each input is hashed while it is read,
/// never read a second time for its digest. It also counts what it read as
/// progress. Past [`HASH_ON_A_THREAD`] bytes the hashing moves to a thread
/// of its own, off the thread that reads and folds a large sweep.
pub(super) struct Hashing<R> {
    inner: R,
    hasher: Hasher,
    progress: crate::progress::Progress,
}

/// Bytes of a file hashed where it is read; the rest is handed to a thread.
const HASH_ON_A_THREAD: u64 = 16 << 20;

enum Hasher {
    Here {
        sha: Sha256,
        bytes: u64,
    },
    /// Blocks in reading order to a thread, which gives back the hash.
    Thread {
        blocks: std::sync::mpsc::SyncSender<Vec<u8>>,
        done: std::thread::JoinHandle<Sha256>,
    },
}

impl<R> Hashing<R> {
    pub(super) fn new(inner: R, progress: &crate::progress::Progress) -> Self {
        Hashing {
            inner,
            hasher: Hasher::Here {
                sha: Sha256::new(),
                bytes: 0,
            },
            progress: progress.clone(),
        }
    }

    /// The sha256 of everything read, in hex.
    pub(super) fn digest(self) -> String {
        let sha = match self.hasher {
            Hasher::Here { sha, .. } => sha,
            Hasher::Thread { blocks, done } => {
                drop(blocks);
                match done.join() {
                    Ok(sha) => sha,
                    // The thread only hashes; should it have died, say so
                    // in the digest rather than record a wrong one.
                    Err(_) => return "unknown".into(),
                }
            }
        };
        format!("{:x}", sha.finalize())
    }

    fn update(&mut self, block: &[u8]) {
        match &mut self.hasher {
            Hasher::Here { sha, bytes } => {
                sha.update(block);
                *bytes += block.len() as u64;
                if *bytes > HASH_ON_A_THREAD {
                    let mut sha = std::mem::take(sha);
                    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(64);
                    let done = std::thread::spawn(move || {
                        for b in rx {
                            sha.update(&b);
                        }
                        sha
                    });
                    self.hasher = Hasher::Thread { blocks: tx, done };
                }
            }
            Hasher::Thread { blocks, .. } => {
                // A thread that ended early (it cannot) leaves the digest
                // to `digest`'s join.
                let _ = blocks.send(block.to_vec());
            }
        }
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.update(&buf[..n]);
        self.progress.inc(n as u64);
        Ok(n)
    }
}
