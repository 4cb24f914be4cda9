//! The only unsafe code of the C API: reading what C passes by pointer (strings, buffers) and
//! writing results through pointers. Each function checks what it can (NULL, length,
//! alignment, UTF-8) and states what it must trust the caller for.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CStr};

use tcpls_bindings::{Error, ErrorKind, Result, MAX_IO_LEN};

fn null(what: &str) -> Error {
    Error::new(ErrorKind::NullPointer, format!("{what} is NULL"))
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that lives and does not change for the
/// call.
pub(crate) unsafe fn string<'a>(ptr: *const c_char, what: &str) -> Result<&'a str> {
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: not NULL, and the caller promises a NUL-terminated string valid for the call.
    let s = unsafe { CStr::from_ptr(ptr) };
    s.to_str().map_err(|_| Error::invalid(format!("{what} is not valid UTF-8")))
}

/// Like [`string`], where NULL means "not given".
///
/// # Safety
/// As [`string`].
pub(crate) unsafe fn optional_string<'a>(ptr: *const c_char, what: &str) -> Result<Option<&'a str>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded from the caller.
    unsafe { string(ptr, what) }.map(Some)
}

fn check_len(len: usize, what: &str) -> Result<()> {
    if len > MAX_IO_LEN {
        return Err(Error::invalid(format!(
            "{what}: a length of {len} bytes is more than one call takes ({MAX_IO_LEN}): pass a smaller length"
        )));
    }
    Ok(())
}

/// A buffer to read from; `len` 0 gives an empty slice whatever `ptr` is.
///
/// # Safety
/// `ptr` is NULL or points to `len` readable bytes that live and are not written by anyone
/// else for the call.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    check_len(len, what)?;
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(null(what));
    }
    // SAFETY: not NULL, len <= MAX_IO_LEN (< isize::MAX), and the caller promises `len`
    // readable bytes for the call; u8 needs no alignment.
    Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// A buffer to write into (`len` > 0).
///
/// # Safety
/// `ptr` is NULL or points to `len` writable bytes that nobody else uses for the call.
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut u8, len: usize, what: &str) -> Result<&'a mut [u8]> {
    check_len(len, what)?;
    if ptr.is_null() {
        return Err(null(what));
    }
    if len == 0 {
        return Err(Error::invalid(format!("{what}: a capacity of 0 bytes leaves no room to read into")));
    }
    // SAFETY: not NULL, 0 < len <= MAX_IO_LEN, and the caller promises `len` writable bytes
    // that nobody else uses for the call; u8 needs no alignment.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
}

/// Stores a result through an out-pointer.
///
/// # Safety
/// `out` is NULL or points to memory for one `T` that nobody else uses for the call.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(null(what));
    }
    if !out.is_aligned() {
        return Err(Error::invalid(format!("{what} is not aligned for its type")));
    }
    // SAFETY: not NULL, aligned, and the caller promises room for one T; `write` does not drop
    // the old (possibly uninitialised) value.
    unsafe { out.write(value) };
    Ok(())
}

/// Stores up to `cap` of `items` into the array at `ptr`; returns how many it stored.
///
/// # Safety
/// `ptr` is NULL or points to `cap` writable `T` that nobody else uses for the call.
pub(crate) unsafe fn write_array<T>(ptr: *mut T, cap: usize, items: Vec<T>, what: &str) -> Result<usize> {
    if cap == 0 {
        return Ok(0);
    }
    if ptr.is_null() {
        return Err(null(what));
    }
    if !ptr.is_aligned() {
        return Err(Error::invalid(format!("{what} is not aligned for its type")));
    }
    if cap.checked_mul(std::mem::size_of::<T>()).is_none_or(|bytes| bytes > MAX_IO_LEN) {
        return Err(Error::invalid(format!("{what}: a capacity of {cap} elements is more than one call takes")));
    }
    let mut stored = 0;
    for item in items.into_iter().take(cap) {
        // SAFETY: stored < cap, and the caller promises `cap` writable, aligned T; `write`
        // does not read or drop what was there (possibly uninitialised).
        unsafe { ptr.add(stored).write(item) };
        stored += 1;
    }
    Ok(stored)
}

/// Calls a C read callback on `chunk`; what it returns is capped at `chunk.len()`.
///
/// # Safety
/// `callback` is a C function that honours the contract of `tcpls_stream_read_with`: it reads
/// at most `len` bytes at `data`, does not keep the pointer, returns normally (no longjmp), and
/// makes no call on the same session.
pub(crate) unsafe fn call_read_callback(
    callback: extern "C" fn(*mut c_void, *const u8, usize) -> usize,
    userdata: *mut c_void,
    chunk: &[u8],
) -> usize {
    // The callback is a safe `extern "C" fn` type to Rust; what makes the call sound is the
    // caller's promise above about what the C function does.
    callback(userdata, chunk.as_ptr(), chunk.len()).min(chunk.len())
}
