//! DDP (RFC 5041): segmentation, tagged and untagged placement.
