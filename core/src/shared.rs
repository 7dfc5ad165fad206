//! [`SharedWeights`]: the device copies of one layer's weights, owned by the layer and
//! borrowed by its kernels, so that a plan of several kernels (one per range of M) holds the
//! weights once wherever those kernels read the same layout.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

/// One copy: its layout's name, its size and the kernel-defined value holding it.
struct Copy {
    layout: &'static str,
    bytes: usize,
    value: Arc<dyn Any + Send + Sync>,
}

/// The weight copies of one layer, by layout. A layer (`fp8_linear::Linear`) makes one and
/// hands it to every kernel of its plan in the build context
/// ([`BuildCtx::with_shared`](crate::BuildCtx::with_shared)); a kernel's
/// `process_weights` takes the copy of its layout from it, or makes it and puts it there.
/// Filled once, when the layer is built (the lock is taken then, never on a call).
#[derive(Default)]
pub struct SharedWeights {
    copies: Mutex<Vec<Copy>>,
}

impl std::fmt::Debug for SharedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWeights")
            .field("layouts", &self.layouts())
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl SharedWeights {
    /// An empty store.
    pub fn new() -> Arc<Self> {
        Arc::new(SharedWeights::default())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Copy>> {
        self.copies.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The copy in `layout`, or the one `make` returns (with its size in bytes), which is
    /// kept for the next kernel that asks for `layout`. A copy of `layout` of another type
    /// than `T` is not handed out: `make` runs and its copy replaces it. `make` runs under
    /// the store's lock (it is called while a layer is built, never on a call).
    pub fn get_or_try_insert<T, E>(
        &self,
        layout: &'static str,
        make: impl FnOnce() -> Result<(T, usize), E>,
    ) -> Result<Arc<T>, E>
    where
        T: Any + Send + Sync,
    {
        let mut copies = self.lock();
        if let Some(c) = copies.iter().find(|c| c.layout == layout) {
            if let Ok(v) = c.value.clone().downcast::<T>() {
                return Ok(v);
            }
        }
        let (value, bytes) = make()?;
        let value = Arc::new(value);
        copies.retain(|c| c.layout != layout);
        copies.push(Copy {
            layout,
            bytes,
            value: value.clone(),
        });
        Ok(value)
    }

    /// The first copy of type `T` whatever its layout (for a kernel that reads every
    /// layout of `T`), and its layout's name.
    pub fn any<T: Any + Send + Sync>(&self) -> Option<(Arc<T>, &'static str)> {
        self.lock()
            .iter()
            .find_map(|c| c.value.clone().downcast::<T>().ok().map(|v| (v, c.layout)))
    }

    /// How many copies the store holds.
    pub fn copies(&self) -> usize {
        self.lock().len()
    }

    /// Their size in bytes, as their makers reported it.
    pub fn bytes(&self) -> usize {
        self.lock().iter().map(|c| c.bytes).sum()
    }

    /// Their layouts' names, in the order they were made.
    pub fn layouts(&self) -> Vec<&'static str> {
        self.lock().iter().map(|c| c.layout).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_layout_made_once() {
        let store = SharedWeights::new();
        let mut made = 0;
        let mut get = |layout| {
            store
                .get_or_try_insert::<Vec<u8>, ()>(layout, || {
                    made += 1;
                    Ok((vec![7u8; 100], 100))
                })
                .unwrap()
        };
        let a = get("rows padded to 16");
        let b = get("rows padded to 16");
        assert!(Arc::ptr_eq(&a, &b));
        let _c = get("rows padded to 128");
        assert_eq!(made, 2);
        assert_eq!(store.copies(), 2);
        assert_eq!(store.bytes(), 200);
        assert_eq!(store.layouts(), ["rows padded to 16", "rows padded to 128"]);
        let (any, layout) = store.any::<Vec<u8>>().unwrap();
        assert!(Arc::ptr_eq(&any, &a) && layout == "rows padded to 16");
        assert!(store.any::<u32>().is_none());
        // A failing maker leaves the store as it was.
        let r = store.get_or_try_insert::<u32, &str>("other", || Err("no memory"));
        assert_eq!(r.unwrap_err(), "no memory");
        assert_eq!(store.copies(), 2);
    }
}
