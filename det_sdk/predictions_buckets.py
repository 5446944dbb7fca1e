"""The former home of the object-store predictions, kept so that its imports still work:
det_sdk.predictions.buckets (the store and its lock) and det_sdk.predictions.loader
(``load_from_bucket``)."""

from det_sdk.predictions.buckets import BucketLock, BucketPartStore, bucket_storage
from det_sdk.predictions.loader import load_from_bucket

__all__ = ["BucketLock", "BucketPartStore", "bucket_storage", "load_from_bucket"]
