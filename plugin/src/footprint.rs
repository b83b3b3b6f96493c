//! Gives the pages that start-up mapped back to the kernel once the kubelet has accepted the
//! plugin's registration (the plugin's `run` calls it after every registration).
//!
//! The kernel maps a file's pages in blocks: a page fault also maps the cached pages around it
//! (fault-around, 64 KiB by default: `do_fault_around` in mm/memory.c) and readahead fills the
//! page cache in large folios (mm/readahead.c). Start-up (argument parsing, logging, discovery,
//! NVML) runs code spread over the whole binary, so afterwards nearly every page of the plugin
//! is resident although serving uses a small part of it.
//!
//! [`release_start_up_pages`] marks every read-only file mapping `MADV_RANDOM` (later faults
//! read only the page they need: no read-ahead) and `MADV_PAGEOUT` (Linux 5.4+: unmap and
//! reclaim the pages no other process maps; shared ones, e.g. the host's libc, stay). Reclaim
//! skips a large page-cache folio that reaches past the mapping (the binary's segments share
//! folios at their edges), so `POSIX_FADV_DONTNEED` on each file then drops the cached pages
//! that nobody maps any more. What serving needs comes back a page at a time on first use. A
//! kernel without `MADV_PAGEOUT` refuses it and nothing changes. Nothing is lost either way:
//! clean file pages are read again from the file, and a writable page is never touched.

#![allow(unsafe_code)]

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::os::fd::AsRawFd;

use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};

/// One read-only, file-backed mapping of `/proc/self/maps`.
#[derive(Debug, PartialEq, Eq)]
struct FileMapping {
    start: usize,
    end: usize,
    path: String,
}

/// The read-only mappings of files in a `/proc/PID/maps` text (proc(5)): a path that starts
/// with `/`, and a second permission letter `-`. Anonymous, `[heap]`-like and writable
/// mappings are left out, and so are deleted files (`(deleted)` after the path).
fn read_only_file_mappings(maps: &str) -> Vec<FileMapping> {
    maps.lines().filter_map(read_only_file_mapping).collect()
}

/// One line: `start-end perms offset dev inode path`, the path being the rest of the line (it
/// may hold spaces).
fn read_only_file_mapping(line: &str) -> Option<FileMapping> {
    let mut rest = line;
    let mut fields = [""; 5];
    for field in &mut fields {
        let (word, tail) = rest.trim_start().split_once(' ')?;
        *field = word;
        rest = tail;
    }
    let path = rest.trim();
    let writable = fields[1].as_bytes().get(1) != Some(&b'-');
    if !path.starts_with('/') || path.ends_with(" (deleted)") || writable {
        return None;
    }
    let (start, end) = fields[0].split_once('-')?;
    Some(FileMapping {
        start: usize::from_str_radix(start, 16).ok()?,
        end: usize::from_str_radix(end, 16).ok()?,
        path: path.to_string(),
    })
}

/// What [`release_start_up_pages`] did, for the log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Mappings advised.
    pub mappings: usize,
    /// Mappings whose pages the kernel refused to page out (before Linux 5.4: `EINVAL`).
    pub refused: usize,
    /// Files whose unmapped cached pages were dropped.
    pub files: usize,
}

/// Advises the kernel that the start-up pages of every read-only file mapping (the binary,
/// its libraries, NVML) are no longer needed, and that later faults are random.
pub fn release_start_up_pages() -> std::io::Result<Released> {
    let maps = fs::read_to_string("/proc/self/maps")?;
    let mut released = Released::default();
    let mut files = BTreeSet::new();
    for mapping in read_only_file_mappings(&maps) {
        released.mappings += 1;
        if !advise(&mapping, libc::MADV_RANDOM) || !advise(&mapping, libc::MADV_PAGEOUT) {
            released.refused += 1;
        }
        files.insert(mapping.path);
    }
    for path in files {
        // Drops only clean pages no process maps; a file that cannot be opened keeps its cache.
        let Ok(file) = File::open(&path) else {
            continue;
        };
        if posix_fadvise(
            file.as_raw_fd(),
            0,
            0,
            PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .is_ok()
        {
            released.files += 1;
        }
    }
    Ok(released)
}

/// `madvise(2)` over one mapping; false when the kernel refused the advice.
fn advise(mapping: &FileMapping, advice: libc::c_int) -> bool {
    // SAFETY: the range is a whole mapping listed by /proc/self/maps, and the two advices used
    // change no memory contents: MADV_RANDOM only tunes readahead, and MADV_PAGEOUT only
    // reclaims pages that fault back with the same contents (clean file pages from the file,
    // private copies from swap). Neither frees or unmaps memory Rust code refers to.
    let rc = unsafe {
        libc::madvise(
            mapping.start as *mut libc::c_void,
            mapping.end - mapping.start,
            advice,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_mappings_of_existing_files_are_advised() {
        let maps = "\
55d0c0000000-55d0c0010000 r--p 00000000 fd:01 123 /usr/bin/edgegpu-device-plugin
55d0c0010000-55d0c0300000 r-xp 00010000 fd:01 123 /usr/bin/edgegpu-device-plugin
55d0c0300000-55d0c0310000 rw-p 00300000 fd:01 123 /usr/bin/edgegpu-device-plugin
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0 [heap]
7f0000000000-7f0000001000 ---p 00000000 00:00 0
7f0000100000-7f0000200000 r-xp 00000000 fd:01 456                        /usr/lib/libc.so.6
7f0000300000-7f0000400000 r-xp 00000000 fd:01 457 /opt/old plugin (deleted)
7f0000500000-7f0000501000 r--p 00000000 fd:01 458 /opt/nvidia libs/libnvidia-ml.so.1
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]
";
        assert_eq!(
            read_only_file_mappings(maps),
            vec![
                FileMapping {
                    start: 0x55d0c0000000,
                    end: 0x55d0c0010000,
                    path: "/usr/bin/edgegpu-device-plugin".into(),
                },
                FileMapping {
                    start: 0x55d0c0010000,
                    end: 0x55d0c0300000,
                    path: "/usr/bin/edgegpu-device-plugin".into(),
                },
                FileMapping {
                    start: 0x7f0000100000,
                    end: 0x7f0000200000,
                    path: "/usr/lib/libc.so.6".into(),
                },
                FileMapping {
                    start: 0x7f0000500000,
                    end: 0x7f0000501000,
                    path: "/opt/nvidia libs/libnvidia-ml.so.1".into(),
                },
            ]
        );
    }

    #[test]
    fn the_process_runs_on_after_its_pages_are_released() {
        let released = release_start_up_pages().unwrap();
        // This test's own binary, at least (and under qemu-user, qemu's view of it).
        assert!(released.mappings > 0, "{released:?}");
        assert!(released.files > 0, "{released:?}");
        // Code and read-only data come back from the file on their next use.
        let maps = fs::read_to_string("/proc/self/maps").unwrap();
        assert!(maps.contains("r-xp"));
        assert_eq!(format!("{:x}", 0xfeed_u32), "feed");
    }
}
