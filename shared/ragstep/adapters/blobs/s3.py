"""An S3 bucket as blob store: the AWS :class:`ragstep.ports.BlobStore` (a folder plays this role locally).

Key ``a/b.json`` is the object ``<prefix>a/b.json``. Keys follow exactly the rules of :class:`.LocalBlobStore`
(:func:`.check_blob_key`), so a key that works on a laptop works on AWS and the other way round. With a prefix the
whole object key must still fit S3's 1024 bytes, which leaves correspondingly less for the blob key.

* ``put`` is one PutObject: S3 stores the whole object or nothing, and readers see the old or the new version.
* Objects are encrypted at rest with SSE-S3 (``AES256``), or with SSE-KMS under ``kms_key_id`` when one is given
  (the function then also needs ``kms:GenerateDataKey`` and ``kms:Decrypt`` on that key).
* ``list`` pages through ListObjectsV2 (1000 keys per page) and returns keys relative to the prefix, sorted.
  "Folder" placeholder objects (keys ending in ``/``, made by the S3 console) are not blobs and are skipped.
* Every AWS failure becomes a one-line :class:`StorageError` naming the bucket and what to check; a missing key is
  :class:`NotFoundError` naming the key. boto3's standard retry mode absorbs throttling (``SlowDown``) first.

boto3 is imported, and the client created (:func:`ragstep.adapters._aws.aws_client`: the process's shared Session,
standard retries, timeouts), on first use, then reused: boto3 clients are thread-safe.
"""

from __future__ import annotations

import threading
from typing import Any, BinaryIO

from ragstep.adapters._aws import aws_client
from ragstep.adapters._http import one_line
from ragstep.adapters.blobs._keys import MAX_KEY_BYTES, check_blob_key, check_segments, check_text
from ragstep.errors import InputError, NotFoundError, RagstepError, StorageError

BUCKET_SETTING = "RAGSTEP_BLOB_BUCKET"
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
_DENIED = frozenset({"AccessDenied", "403", "Forbidden", "AllAccessDisabled", "AccountProblem"})
_CREDENTIALS = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired"}
)
_WRONG_REGION = frozenset(
    {"PermanentRedirect", "AuthorizationHeaderMalformed", "301", "IllegalLocationConstraintException"}
)
_BUSY = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "503", "500", "RequestTimeout"})


class S3BlobStore:
    """Blobs as objects of ``bucket`` under ``prefix`` (e.g. ``"tenant-a/"``; a trailing ``/`` is implied).

    ``client`` is a boto3 S3 client to use instead of creating one (tests, custom endpoints); ``region_name``
    is used only when this store creates the client.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        client: Any = None,
        *,
        kms_key_id: str | None = None,
        region_name: str | None = None,
    ) -> None:
        if not bucket:
            raise StorageError(f"no S3 bucket configured for blobs; set {BUCKET_SETTING}")
        self.bucket = bucket
        prefix = prefix.strip("/") if isinstance(prefix, str) else prefix
        if prefix:
            check_blob_key(prefix)
            prefix += "/"
            if len(prefix.encode("utf-8")) >= MAX_KEY_BYTES:
                raise InputError(f"blob prefix {prefix!r} leaves no room for keys under S3's {MAX_KEY_BYTES} bytes")
        self.prefix: str = prefix
        self.kms_key_id = kms_key_id or None
        self._region = region_name
        self._client = client
        self._lock = threading.Lock()
        # A HEAD of a missing key and a HEAD in a missing bucket both answer a bare 404; the first such answer is
        # told apart by one HeadBucket, after which the bucket is known to exist.
        self._bucket_seen = False

    # -- plumbing ------------------------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._call_guarded("connect to", "", lambda: aws_client("s3", region=self._region))
        return self._client

    def _object_key(self, key: str) -> str:
        check_blob_key(key)
        full = self.prefix + key
        size = len(full.encode("utf-8"))
        if size > MAX_KEY_BYTES:
            raise InputError(
                f"blob key {key!r} is {size} bytes of UTF-8 with the prefix {self.prefix!r}; "
                f"S3's limit is {MAX_KEY_BYTES}: shorten the key"
            )
        return full

    def _where(self, object_key: str = "") -> str:
        return f"s3://{self.bucket}/{object_key}"

    def _call(self, action: str, object_key: str, operation: str, **params: Any) -> Any:
        return self._call_guarded(action, object_key, lambda: getattr(self.client, operation)(**params))

    def _call_guarded(self, action: str, object_key: str, fn: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn()
        except ClientError as exc:
            raise self._client_error(action, object_key, exc) from exc
        except BotoCoreError as exc:
            raise StorageError(
                f"cannot {action} {self._where(object_key)}: {one_line(str(exc))}; check AWS credentials, region and "
                "network access to S3"
            ) from exc

    def _client_error(self, action: str, object_key: str, exc: Any) -> RagstepError:
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = one_line(error.get("Message") or code)
        where = self._where(object_key)
        if code in _MISSING and object_key:
            key = object_key[len(self.prefix) :]
            return NotFoundError(f"blob {key!r} not found in {self._where(self.prefix)}")
        if code == "NoSuchBucket" or code in _MISSING:  # a bare 404 with no key in play: HeadBucket
            hint = f"check {BUCKET_SETTING} and the region (AWS_REGION)"
            return StorageError(f"cannot {action} {where}: bucket {self.bucket!r} does not exist; {hint}")
        if code.startswith("KMS.") or "KMS" in message:
            hint = (
                "check that the KMS key exists, is enabled and lets this role use it (kms:GenerateDataKey, kms:Decrypt)"
            )
            return StorageError(f"cannot {action} {where}: {message}; {hint}")
        if code in _DENIED:
            hint = f"check the function's IAM policy (S3CrudPolicy on bucket {self.bucket!r}) and the bucket policy"
            return StorageError(f"cannot {action} {where}: access denied; {hint}")
        if code in _CREDENTIALS:
            return StorageError(f"cannot {action} {where}: {message}; check the AWS credentials")
        if code in _WRONG_REGION:
            hint = f"bucket {self.bucket!r} is in another region: set AWS_REGION to the bucket's region"
            return StorageError(f"cannot {action} {where}: {message}; {hint}")
        if code in _BUSY:
            return StorageError(f"cannot {action} {where}: S3 is busy ({code}); retry shortly")
        return StorageError(f"cannot {action} {where}: {code}: {message}")

    # -- the port ------------------------------------------------------------------------------------------------

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Store ``data`` under ``key`` with one PutObject (atomic); returns ``s3://bucket/<prefix><key>``."""
        object_key = self._object_key(key)
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InputError(f"blob data must be bytes, got {type(data).__name__}")
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": object_key,
            "Body": bytes(data),
            "ContentType": content_type or "application/octet-stream",
        }
        if self.kms_key_id:
            params.update(ServerSideEncryption="aws:kms", SSEKMSKeyId=self.kms_key_id)
        else:
            params["ServerSideEncryption"] = "AES256"
        self._call("write", object_key, "put_object", **params)
        self._bucket_seen = True
        return self._where(object_key)

    def put_file(self, key: str, source: BinaryIO, content_type: str = "application/octet-stream") -> str:
        """Store what ``source`` holds with boto3's managed transfer (multipart above 8 MiB, a few 8 MiB parts in
        memory at a time, never the whole file); the object appears only when the upload completes."""
        object_key = self._object_key(key)
        extra: dict[str, Any] = {"ContentType": content_type or "application/octet-stream"}
        if self.kms_key_id:
            extra.update(ServerSideEncryption="aws:kms", SSEKMSKeyId=self.kms_key_id)
        else:
            extra["ServerSideEncryption"] = "AES256"

        def upload() -> None:
            from boto3.exceptions import S3UploadFailedError
            from botocore.exceptions import ClientError

            try:
                self.client.upload_fileobj(source, self.bucket, object_key, ExtraArgs=extra)
            except S3UploadFailedError as exc:
                # The transfer manager wraps S3's answer; unwrapped, it gets the same one-line error as put.
                cause = exc.__cause__ or exc.__context__
                if isinstance(cause, ClientError):
                    raise cause from None
                raise StorageError(f"cannot write {self._where(object_key)}: {one_line(str(exc))}") from exc

        self._call_guarded("write", object_key, upload)
        self._bucket_seen = True
        return self._where(object_key)

    def get(self, key: str) -> bytes:
        object_key = self._object_key(key)

        def read() -> bytes:
            response = self.client.get_object(Bucket=self.bucket, Key=object_key)
            with response["Body"] as body:  # reading the stream can fail too (reset connection, timeout)
                return body.read()

        return self._call_guarded("read", object_key, read)

    def exists(self, key: str) -> bool:
        object_key = self._object_key(key)
        try:
            self._call("check", object_key, "head_object", Bucket=self.bucket, Key=object_key)
        except NotFoundError:
            if not self._bucket_seen:
                self._call("open", "", "head_bucket", Bucket=self.bucket)  # NoSuchBucket -> StorageError
                self._bucket_seen = True
            return False
        self._bucket_seen = True
        return True

    def delete(self, key: str) -> None:
        """Remove the blob; a missing key is a no-op (S3's DeleteObject succeeds either way)."""
        object_key = self._object_key(key)
        self._call("delete", object_key, "delete_object", Bucket=self.bucket, Key=object_key)

    def list(self, prefix: str = "") -> list[str]:
        """Keys starting with ``prefix`` (a plain string prefix), relative to the store's prefix, sorted."""
        check_text("blob prefix", prefix)
        folder, _, _ = prefix.rpartition("/")
        if folder:
            check_segments("blob prefix", prefix, folder.split("/"))
        search = self.prefix + prefix
        if len(search.encode("utf-8")) > MAX_KEY_BYTES:
            return []  # no object key can be that long

        def collect() -> list[str]:
            keys: list[str] = []
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=search):
                for obj in page.get("Contents", ()):
                    name = obj["Key"][len(self.prefix) :]
                    if name and not name.endswith("/"):
                        keys.append(name)
            return keys

        keys = self._call_guarded("list", search, collect)
        self._bucket_seen = True
        # S3 lists in UTF-8 byte order, which is code-point order: sorting only guards the contract.
        return sorted(keys)
