//! Handles: what a C program holds is a key into this table, never an address of ours.
//!
//! A handle's value is a number that is never reused, cast to the opaque pointer type. Every
//! call looks it up and takes a reference to the object for its duration, so a NULL, forged,
//! freed or wrongly typed handle is an error (`TCPLS_ERR_INVALID_HANDLE`) instead of a
//! dereference of freed memory, and freeing a handle while another thread is inside a call
//! with it is safe (the object goes when that call returns).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tcpls_bindings::{ConfigSpec, Error, ErrorKind, ListenerCore, Result, SessionCore, StreamCore};

/// The objects behind handles.
#[derive(Clone)]
pub(crate) enum Object {
    Config(Arc<Mutex<ConfigSpec>>),
    Session(Arc<SessionCore>),
    Stream(Arc<StreamCore>),
    Listener(Arc<ListenerCore>),
}

impl Object {
    fn type_name(&self) -> &'static str {
        match self {
            Object::Config(_) => "tcpls_config",
            Object::Session(_) => "tcpls_session",
            Object::Stream(_) => "tcpls_stream",
            Object::Listener(_) => "tcpls_listener",
        }
    }
}

fn table() -> &'static RwLock<HashMap<usize, Object>> {
    static TABLE: std::sync::OnceLock<RwLock<HashMap<usize, Object>>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| RwLock::new(HashMap::new()))
}

/// Handle values: 16 apart (so they look like aligned pointers in a debugger), never 0.
static NEXT: AtomicUsize = AtomicUsize::new(1);

/// Registers `object`; returns its handle.
pub(crate) fn insert<T>(object: Object) -> *mut T {
    let key = NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(16);
    match table().write() {
        Ok(mut t) => t.insert(key, object),
        Err(p) => p.into_inner().insert(key, object),
    };
    std::ptr::without_provenance_mut(key)
}

/// The object behind `handle`.
pub(crate) fn get<T>(handle: *const T, expected: &'static str) -> Result<Object> {
    if handle.is_null() {
        return Err(Error::new(ErrorKind::NullPointer, format!("the {expected} handle is NULL")));
    }
    let found = match table().read() {
        Ok(t) => t.get(&handle.addr()).cloned(),
        Err(p) => p.into_inner().get(&handle.addr()).cloned(),
    };
    match found {
        Some(object) if object.type_name() == expected => Ok(object),
        Some(object) => Err(Error::new(
            ErrorKind::InvalidHandle,
            format!("a {} handle was passed where a {expected} is expected", object.type_name()),
        )),
        None => Err(Error::new(
            ErrorKind::InvalidHandle,
            format!("not a live {expected} handle (freed already, or never returned by this library)"),
        )),
    }
}

/// Forgets `handle`; returns its object (the caller finishes it off).
pub(crate) fn remove<T>(handle: *const T, expected: &'static str) -> Result<Object> {
    get(handle, expected)?;
    let removed = match table().write() {
        Ok(mut t) => t.remove(&handle.addr()),
        Err(p) => p.into_inner().remove(&handle.addr()),
    };
    removed.ok_or_else(|| Error::new(ErrorKind::InvalidHandle, format!("the {expected} handle was freed meanwhile")))
}

macro_rules! typed {
    ($get:ident, $remove:ident, $variant:ident, $ty:ty, $c:ty, $name:literal) => {
        pub(crate) fn $get(handle: *const $c) -> Result<$ty> {
            match get(handle, $name)? {
                Object::$variant(o) => Ok(o),
                _ => Err(Error::new(ErrorKind::InvalidHandle, concat!("not a ", $name, " handle"))),
            }
        }

        pub(crate) fn $remove(handle: *const $c) -> Result<$ty> {
            match remove(handle, $name)? {
                Object::$variant(o) => Ok(o),
                _ => Err(Error::new(ErrorKind::InvalidHandle, concat!("not a ", $name, " handle"))),
            }
        }
    };
}

typed!(config, remove_config, Config, Arc<Mutex<ConfigSpec>>, crate::tcpls_config, "tcpls_config");
typed!(session, remove_session, Session, Arc<SessionCore>, crate::tcpls_session, "tcpls_session");
typed!(stream, remove_stream, Stream, Arc<StreamCore>, crate::tcpls_stream, "tcpls_stream");
typed!(listener, remove_listener, Listener, Arc<ListenerCore>, crate::tcpls_listener, "tcpls_listener");
