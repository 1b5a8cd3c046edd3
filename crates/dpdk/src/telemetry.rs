//! An application's own commands on DPDK's telemetry socket
//! (`/var/run/dpdk/<file-prefix>/dpdk_telemetry.v2`, read with `dpdk-telemetry.py`), next to
//! the ones DPDK registers itself (`/ethdev/stats,<port>`, `/ethdev/xstats,<port>`, ...).
//!
//! DPDK 22.11's callback takes no user data, so commands are kept in a process-wide table and
//! one trampoline looks the command up by name. Callbacks run on DPDK's telemetry thread.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Errno, Error, Result};

/// What a command answers: a dictionary of counters (DPDK allows at most 256 entries; keys
/// longer than 63 bytes are cut).
pub type Answer = Vec<(String, u64)>;

type Command = Arc<dyn Fn(&str) -> Answer + Send + Sync>;

fn commands() -> &'static Mutex<HashMap<String, Command>> {
    static COMMANDS: OnceLock<Mutex<HashMap<String, Command>>> = OnceLock::new();
    COMMANDS.get_or_init(Default::default)
}

/// Most entries a telemetry dictionary holds (`RTE_TEL_MAX_DICT_ENTRIES`).
const MAX_ENTRIES: usize = 256;
/// Longest key DPDK keeps, without its NUL (`RTE_TEL_MAX_STRING_LEN` is 64 for names).
const MAX_KEY: usize = 63;

/// Registers `cmd` (it must start with `/`; DPDK allows letters, digits, `_` and `/`) with
/// `help`; `answer` is called with the command's parameters (the text after a comma, or "") on
/// each request and returns its counters. Registering may happen before or after the EAL
/// starts; a second registration of the same name is refused.
pub fn register(
    cmd: &str,
    help: &str,
    answer: impl Fn(&str) -> Answer + Send + Sync + 'static,
) -> Result<()> {
    let c_cmd = CString::new(cmd)
        .map_err(|_| Error::InvalidArgument(format!("telemetry command {cmd:?} contains NUL")))?;
    let c_help = CString::new(help)
        .map_err(|_| Error::InvalidArgument(format!("telemetry help {help:?} contains NUL")))?;
    {
        let mut table = commands()
            .lock()
            .map_err(|_| Error::InvalidArgument("telemetry table poisoned".into()))?;
        if table.contains_key(cmd) {
            return Err(Error::InvalidArgument(format!(
                "telemetry command {cmd:?} is already registered"
            )));
        }
        table.insert(cmd.to_owned(), Arc::new(answer));
    }
    // SAFETY: both strings are NUL-terminated and DPDK copies them (strlcpy into its own
    // table); `trampoline` has the `telemetry_cb` signature and never unwinds.
    let rc = unsafe {
        dpdk_sys::rte_telemetry_register_cmd(c_cmd.as_ptr(), Some(trampoline), c_help.as_ptr())
    };
    if rc != 0 {
        if let Ok(mut table) = commands().lock() {
            table.remove(cmd);
        }
        return Err(Error::InvalidArgument(format!(
            "telemetry refused command {cmd:?}: {}",
            Errno(-rc)
        )));
    }
    Ok(())
}

/// The one callback DPDK calls for every command registered here.
extern "C" fn trampoline(
    cmd: *const c_char,
    params: *const c_char,
    info: *mut dpdk_sys::rte_tel_data,
) -> c_int {
    if cmd.is_null() || info.is_null() {
        return -libc_einval();
    }
    // SAFETY: DPDK passes the NUL-terminated command it matched, and its parameters (or NULL).
    let cmd = unsafe { CStr::from_ptr(cmd) }
        .to_string_lossy()
        .into_owned();
    let params = if params.is_null() {
        String::new()
    } else {
        // SAFETY: as above, a NUL-terminated string DPDK owns for the call.
        unsafe { CStr::from_ptr(params) }
            .to_string_lossy()
            .into_owned()
    };
    let Some(f) = commands().lock().ok().and_then(|t| t.get(&cmd).cloned()) else {
        return -libc_einval();
    };
    // A panic must not cross into C.
    let Ok(entries) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&params))) else {
        return -libc_einval();
    };
    // SAFETY: `info` is the data object DPDK handed to this call.
    unsafe { dpdk_sys::rte_tel_data_start_dict(info) };
    for (key, value) in entries.into_iter().take(MAX_ENTRIES) {
        let mut key = key;
        key.truncate(MAX_KEY);
        let Ok(key) = CString::new(key) else { continue };
        // SAFETY: `info` was started as a dict above; `key` is NUL-terminated and copied.
        unsafe { dpdk_sys::rte_tel_data_add_dict_u64(info, key.as_ptr(), value) };
    }
    0
}

/// EINVAL, without a libc dependency (Linux's value).
const fn libc_einval() -> c_int {
    22
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trampoline finds a registered command and fills DPDK's dictionary.
    #[test]
    fn trampoline_answers_registered_commands() {
        register("/pxtest/count", "A test command.", |params| {
            vec![("value".into(), params.len() as u64 + 41)]
        })
        .unwrap();
        // An unknown command is refused without touching the data.
        let unknown = CString::new("/pxtest/none").unwrap();
        let mut data = std::ptr::null_mut::<dpdk_sys::rte_tel_data>();
        assert!(trampoline(unknown.as_ptr(), std::ptr::null(), data) < 0);
        // SAFETY: rte_tel_data_alloc returns a zeroed container DPDK can fill, or NULL.
        data = unsafe { dpdk_sys::rte_tel_data_alloc() };
        assert!(!data.is_null());
        let cmd = CString::new("/pxtest/count").unwrap();
        let p = CString::new("x").unwrap();
        assert_eq!(trampoline(cmd.as_ptr(), p.as_ptr(), data), 0);
        // SAFETY: frees the container allocated above.
        unsafe { dpdk_sys::rte_tel_data_free(data) };
        // A second registration of the same name is refused.
        assert!(register("/pxtest/count", "again", |_| Vec::new()).is_err());
    }
}
