"""``s3://`` (and ``s3a://``): S3 and S3-compatible stores through s3fs, with S3's conditional writes (If-Match /
If-None-Match), on which the lease relies (gensets.store), and a HEAD of the bucket so that missing or wrong
credentials say so."""

from __future__ import annotations

from gensets.store import Store


class S3Store(Store):
    """Replaces an object only if it is still the one of a given ETag (S3's If-Match)."""

    package = "s3fs"
    conditional = True

    def _look_for_bucket(self, bucket: str) -> None:
        try:  # HEAD the bucket, so that missing or wrong credentials say so (exists() would be False)
            self.fs.call_s3("head_bucket", Bucket=bucket)
        except FileNotFoundError:
            raise FileNotFoundError("the specified bucket does not exist") from None

    def put_if(self, rel: str, data: bytes, etag: str | None) -> str | None:
        """S3: write ``rel`` only if it is still the object of ``etag`` (If-Match), or, ``etag`` None, only if there
        is none (If-None-Match: *); the written object's ETag, or None when the condition failed (another writer's
        object is there, or none is)."""
        bucket, key, _ = self.fs.split_path(self.path(rel))
        match = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        with self._errors(rel, "writing it conditionally"):
            try:
                out = self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **match)
            except Exception as e:  # noqa: BLE001 - told apart below; anything else is _errors' one line
                if _condition_failed(e):
                    return None
                raise
            finally:
                self.fs.invalidate_cache(self.path(rel))
        return out["ETag"]

    def etag(self, rel: str) -> str | None:
        """S3: the ETag of the object ``rel`` now, or None when there is none."""
        bucket, key, _ = self.fs.split_path(self.path(rel))
        with self._errors(rel, "looking for it"):
            try:
                return self.fs.call_s3("head_object", Bucket=bucket, Key=key)["ETag"]
            except FileNotFoundError as e:
                if "bucket" in str(e).lower():
                    raise
                return None

    def remove_if(self, rel: str, etag: str) -> bool:
        """S3: remove ``rel`` only if it is still the object of ``etag`` (If-Match); False when it is not."""
        bucket, key, _ = self.fs.split_path(self.path(rel))
        with self._errors(rel, "removing it"):
            try:
                self.fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=etag)
            except Exception as e:  # noqa: BLE001 - as in put_if
                if _condition_failed(e):
                    return False
                raise
            finally:
                self.fs.invalidate_cache(self.path(rel))
        return True


def _condition_failed(e: BaseException) -> bool:
    """Whether ``e`` (an s3fs error, the botocore one its cause) says a conditional write's condition failed: 412
    (another object is there), 409 (a concurrent conditional write: S3 asks to look again), or the object of an
    If-Match gone (404, not a bucket)."""
    if isinstance(e, FileExistsError):  # s3fs: If-None-Match failed
        return True
    if isinstance(e, FileNotFoundError) and "bucket" not in str(e).lower():
        return True
    for x in (e, e.__cause__):
        code = str((getattr(x, "response", None) or {}).get("Error", {}).get("Code", ""))
        if code in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey"):
            return True
    return False
