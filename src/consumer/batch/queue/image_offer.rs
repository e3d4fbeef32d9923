//! A batch's image as an attempt offers it to its host (issue 31): a
//! docker-archive or an OCI layout by its parts, the config and each layer
//! blob a content-addressed input of its own cut out of the archive where
//! it lies (nothing is copied), so a layer that several images share is
//! one input and crosses to a host once; a plain root-filesystem tar, its
//! own one layer, whole. The driver's side: it reads the archive's index
//! (on the blocking pool); what the host is told is a [`JobImage`].

use std::path::Path;

use crate::consumer::batch::attempt::JobImage;
use crate::consumer::batch::record::BatchImage;
use crate::data::{FilePart, InputSpec};
use crate::image::{archive_parts, ArchiveParts, ImageId, ImageLimits, Member};
use crate::net::protocol::{ImageRef, InputRef, LayeredImageRef};

/// Where the batch's archive holds its config and layers (its index and
/// documents read again: milliseconds), checked to be still the image the
/// batch was made with; `None` for a root-filesystem tar.
pub(super) async fn image_parts(image: &BatchImage) -> Result<Option<ArchiveParts>, String> {
    let local = image.local.clone();
    let parts = tokio::task::spawn_blocking(move || {
        // The reader's default bounds: the consumer checked the image
        // with its own when the batch was made.
        archive_parts(&local, &ImageLimits::default())
    })
    .await
    .map_err(|e| format!("image {}: reading stopped: {e}", image.local.display()))?
    .map_err(|e| e.to_string())?;
    if let Some(parts) = &parts {
        if parts.id.to_bytes() != image.id {
            return Err(format!(
                "image {}: the archive now holds the image {}, not {} the batch was made with",
                image.local.display(),
                parts.id,
                ImageId::from_bytes(&image.id)
            ));
        }
    }
    Ok(parts)
}

/// The inputs that carry the image: its config then its layers, bottom
/// first, each a part of the archive (or the whole archive, for a
/// root-filesystem tar). Their paths only name them in messages.
pub(super) fn image_specs(image: &BatchImage, parts: Option<&ArchiveParts>) -> Vec<InputSpec> {
    let name = image_name(&image.local);
    let Some(parts) = parts else {
        return vec![InputSpec {
            path: name,
            local: image.local.clone(),
            part: None,
        }];
    };
    let spec = |what: String, m: Member| InputSpec {
        path: format!("{name} {what}"),
        local: image.local.clone(),
        part: Some(FilePart {
            offset: m.offset,
            size: m.size,
        }),
    };
    std::iter::once(spec("config".into(), parts.config))
        .chain(
            parts
                .layers
                .iter()
                .enumerate()
                .map(|(i, m)| spec(format!("layer {}", i + 1), *m)),
        )
        .collect()
}

/// What the host is told of the image, from the references of the inputs
/// [`image_specs`] made (in their order).
pub(super) fn job_image(
    image: &BatchImage,
    layered: bool,
    mut refs: Vec<InputRef>,
) -> Result<JobImage, String> {
    if refs.is_empty() {
        return Err("the image was not offered".into());
    }
    if !layered {
        let archive = refs.remove(0);
        return Ok(JobImage::Whole(ImageRef {
            id: image.id,
            archive,
        }));
    }
    let config = refs.remove(0);
    Ok(JobImage::Layers(LayeredImageRef {
        id: image.id,
        name: image_name(&image.local),
        config,
        layers: refs,
    }))
}

/// What an image's archive is called in a submission (and so in a host's
/// messages): its file name, cut to what a host takes.
fn image_name(local: &Path) -> String {
    let name = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "image".to_string());
    name.chars().take(128).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_images_parts_are_offered_config_first_and_told_to_the_host_in_order() {
        let image = BatchImage {
            local: "/data/probe.tar".into(),
            id: [7; 32],
        };
        let parts = ArchiveParts {
            id: ImageId::from_bytes(&[7; 32]),
            format: "docker-archive",
            config: Member {
                offset: 512,
                size: 100,
            },
            layers: vec![
                Member {
                    offset: 1024,
                    size: 2048,
                },
                Member {
                    offset: 4096,
                    size: 10,
                },
            ],
        };
        let specs = image_specs(&image, Some(&parts));
        let names: Vec<&str> = specs.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(
            names,
            ["probe.tar config", "probe.tar layer 1", "probe.tar layer 2"]
        );
        assert_eq!(
            specs[1].part,
            Some(FilePart {
                offset: 1024,
                size: 2048
            })
        );
        let r = |n: u8, size| InputRef {
            path: format!("part {n}"),
            hash: [n; 32],
            size,
        };
        let told = job_image(&image, true, vec![r(0, 100), r(1, 2048), r(2, 10)]).unwrap();
        assert_eq!(told.bytes(), 2158);
        let JobImage::Layers(l) = &told else {
            panic!("{told:?}")
        };
        assert_eq!((l.id, l.name.as_str()), ([7; 32], "probe.tar"));
        assert_eq!(l.config.hash, [0; 32]);
        assert_eq!(l.layers, [r(1, 2048), r(2, 10)]);
        // A root-filesystem tar crosses whole.
        let specs = image_specs(&image, None);
        assert_eq!((specs.len(), specs[0].part), (1, None));
        assert!(matches!(
            job_image(&image, false, vec![r(9, 5)]).unwrap(),
            JobImage::Whole(ImageRef { id: [7, ..], .. })
        ));
        assert!(job_image(&image, true, Vec::new()).is_err());
    }
}
