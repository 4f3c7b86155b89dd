//! `Bootstrap`: the name service (register a send right under a name, look
//! one up), per user, through `ferryd` or an embedded server.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::name_error;
use crate::port::SendRight;
use crate::{gone, interruptible, lock, lock_py};

/// A connection to the name service: `FERRY_BOOTSTRAP`'s socket, the default
/// one, or `path`. Without a running `ferryd`, the first program starts an
/// embedded name server (unless `FERRY_NO_EMBED=1`).
#[pyclass(module = "ferry._ferry", frozen)]
#[derive(Debug)]
pub struct Bootstrap {
    inner: Mutex<Option<ferry::Bootstrap>>,
}

impl Bootstrap {
    fn call<R: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut ferry::Bootstrap) -> Result<R, ferry::NameError> + Send) -> PyResult<R> {
        let inner = &self.inner;
        py.detach(|| {
            let mut g = lock(inner);
            g.as_mut().map(f)
        })
        .ok_or_else(|| gone("Bootstrap"))?
        .map_err(name_error)
    }
}

#[pymethods]
impl Bootstrap {
    /// Connects to the name service.
    #[new]
    #[pyo3(signature = (path=None))]
    fn new(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Bootstrap> {
        let bs = py
            .detach(|| match path {
                Some(p) => ferry::Bootstrap::connect_to(&p),
                None => ferry::Bootstrap::connect(),
            })
            .map_err(name_error)?;
        Ok(Bootstrap { inner: Mutex::new(Some(bs)) })
    }

    /// Starts a private name server on a thread of this process, listening
    /// at `dir/bootstrap` (`dir` is created 0700 if missing and must not be
    /// writable by other users), and connects to it. It lives as long as
    /// this process; other processes reach it with `FERRY_BOOTSTRAP` set to
    /// this connection's `path`.
    #[staticmethod]
    fn private(py: Python<'_>, dir: PathBuf) -> PyResult<Bootstrap> {
        let bs = py.detach(|| ferry::Bootstrap::private(&dir)).map_err(name_error)?;
        Ok(Bootstrap { inner: Mutex::new(Some(bs)) })
    }

    /// Registers a copy of `right` under `name` for this user. Raises
    /// `NameTaken` if a live port has it.
    fn register(&self, py: Python<'_>, name: &str, right: &Bound<'_, SendRight>) -> PyResult<()> {
        let copy = right.get().with(py, |r| r.try_clone())?.map_err(crate::errors::os_error)?;
        self.call(py, |b| b.register(name, &copy))
    }

    /// Registers a copy of `right` under `name` among the system names,
    /// which every user of the name server finds after their own (root
    /// only: anyone else gets `NameDenied`). Raises `NameTaken` if a live
    /// port has it.
    fn register_system(&self, py: Python<'_>, name: &str, right: &Bound<'_, SendRight>) -> PyResult<()> {
        let copy = right.get().with(py, |r| r.try_clone())?.map_err(crate::errors::os_error)?;
        self.call(py, |b| b.register_system(name, &copy))
    }

    /// Registers a copy of `right` under `name` among the system names as a
    /// service that hands every lookup a port of its own (root only:
    /// anyone else gets `NameDenied`): all send rights to one port share
    /// one socket, which any holder may shut down or fill for all. For
    /// each lookup the name server sends the new port's receive right to
    /// `right` in a `SERVICE_PORT` message; take it with
    /// `Message.take_service_port()` and serve it (a `PortSet` holds them
    /// all) as the port of the user it names. Raises `NameTaken` if a live
    /// port has the name.
    fn register_system_service(&self, py: Python<'_>, name: &str, right: &Bound<'_, SendRight>) -> PyResult<()> {
        let copy = right.get().with(py, |r| r.try_clone())?.map_err(crate::errors::os_error)?;
        self.call(py, |b| b.register_system_service(name, &copy))
    }

    /// Looks `name` up; returns a send right. Raises `NameNotFound`.
    fn lookup(&self, py: Python<'_>, name: &str) -> PyResult<SendRight> {
        self.call(py, |b| b.lookup(name)).map(SendRight::wrap)
    }

    /// Looks `name` up, waiting up to `timeout` seconds (`None`: forever;
    /// `0`: one lookup) for it to be registered, for a client that may start
    /// before its server; returns a send right. Raises `NameNotFound` if it
    /// was not registered in time. Ctrl-C interrupts the wait.
    #[pyo3(signature = (name, timeout=None))]
    fn lookup_wait(&self, py: Python<'_>, name: &str, timeout: Option<f64>) -> PyResult<SendRight> {
        let t = crate::timeout(timeout)?;
        let inner = &self.inner;
        let r = interruptible(py, t, |e| matches!(e, Some(ferry::NameError::NotFound)), |slice| {
            let mut g = lock(inner);
            let b = g.as_mut().ok_or(None)?;
            match slice {
                ferry::Timeout::After(d) => b.lookup_wait(name, d),
                ferry::Timeout::Zero | ferry::Timeout::Infinite => b.lookup(name),
            }
            .map_err(Some)
        })?;
        match r {
            Ok(right) => Ok(SendRight::wrap(right)),
            Err(Some(e)) => Err(name_error(e)),
            Err(None) => Err(gone("Bootstrap")),
        }
    }

    /// Removes this user's registration of `name`.
    fn unregister(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.call(py, |b| b.unregister(name))
    }

    /// This user's registrations (and the system's), as dicts with `name`,
    /// `uid`, `owner_pid` and `queued_bytes`.
    fn list<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let entries = self.call(py, |b| b.list())?;
        entries
            .into_iter()
            .map(|e| {
                let d = PyDict::new(py);
                d.set_item("name", e.name)?;
                d.set_item("uid", e.uid)?;
                d.set_item("owner_pid", e.owner_pid)?;
                d.set_item("queued_bytes", e.queued_bytes)?;
                Ok(d)
            })
            .collect()
    }

    /// The socket path of the name server.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<PathBuf> {
        Ok(lock_py(py, &self.inner).as_ref().ok_or_else(|| gone("Bootstrap"))?.path().to_path_buf())
    }

    /// Closes the connection. Idempotent.
    fn close(&self, py: Python<'_>) {
        let b = lock_py(py, &self.inner).take();
        drop(b);
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }
}
