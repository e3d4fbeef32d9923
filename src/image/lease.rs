//! Which images guests run in: a count per image, raised by an
//! [`ImageLease`] and lowered when the last clone of it is dropped. The
//! cache hands a lease out with every image it returns, the guest holds it
//! until its end is reported, and eviction skips every image with a count.
//! Knows image ids only; not directories, guests nor the clock.

use super::ImageId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The counts, shared by the cache and every lease it handed out.
#[derive(Debug, Default)]
pub(super) struct InUse {
    counts: Mutex<HashMap<ImageId, usize>>,
}

impl InUse {
    fn counts(&self) -> MutexGuard<'_, HashMap<ImageId, usize>> {
        // A panic while the map was held cannot leave a count half
        // changed: every change is one insert or one remove.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new lease on `id`. The cache takes the first lease of an image
    /// under its catalog lock, so that no eviction falls between finding
    /// the image and leasing it.
    pub(super) fn lease(self: &Arc<Self>, id: &ImageId) -> ImageLease {
        *self.counts().entry(id.clone()).or_insert(0) += 1;
        ImageLease {
            id: id.clone(),
            in_use: Arc::clone(self),
        }
    }

    /// Whether any lease on `id` is alive.
    pub(super) fn contains(&self, id: &ImageId) -> bool {
        self.counts().contains_key(id)
    }
}

/// An image in use: while one clone of it lives, the cache does not evict
/// the image. Equal when it names the same image.
pub struct ImageLease {
    id: ImageId,
    in_use: Arc<InUse>,
}

impl ImageLease {
    /// The image in use.
    pub fn id(&self) -> &ImageId {
        &self.id
    }
}

impl Clone for ImageLease {
    fn clone(&self) -> ImageLease {
        self.in_use.lease(&self.id)
    }
}

impl Drop for ImageLease {
    fn drop(&mut self) {
        let mut counts = self.in_use.counts();
        if let Some(n) = counts.get_mut(&self.id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.id);
            }
        }
    }
}

impl PartialEq for ImageLease {
    fn eq(&self, other: &ImageLease) -> bool {
        self.id == other.id
    }
}

impl Eq for ImageLease {}

impl fmt::Debug for ImageLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ImageLease").field(&self.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_in_use_until_its_last_lease_is_dropped() {
        let in_use = Arc::new(InUse::default());
        let id = ImageId::from_hex(&"ab".repeat(32)).unwrap();
        let other = ImageId::from_hex(&"cd".repeat(32)).unwrap();
        assert!(!in_use.contains(&id));
        let first = in_use.lease(&id);
        let second = first.clone();
        assert!(in_use.contains(&id));
        assert!(!in_use.contains(&other));
        drop(first);
        assert!(in_use.contains(&id), "a clone still holds it");
        drop(second);
        assert!(!in_use.contains(&id));
    }
}
