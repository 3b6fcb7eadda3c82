#!/usr/bin/python3
"""Reads and writes the test bucket with boto3, an independent S3 client, so a test can prove
that what gpucache's cold tier wrote is ordinary S3 (and seed objects for it to read).

  s3_check.py --env DIR/env create-bucket NAME
  s3_check.py --env DIR/env list [PREFIX]        keys, one a line, in S3 (byte) order
  s3_check.py --env DIR/env get KEY OUTFILE      '-' writes to stdout
  s3_check.py --env DIR/env put KEY INFILE       '-' reads stdin
  s3_check.py --env DIR/env delete KEY

The bucket is GPUCACHE_S3_BUCKET from the env file, written by rgw.sh start. Exit status: 0 on
success, 1 when S3 answered with an error (its code and message go to stderr, e.g. NoSuchKey),
2 for a usage error.

#!/usr/bin/python3 on purpose: Debian's python3-boto3 is installed for the system Python, not
for a pyenv or venv python3 that may come first on PATH.
"""
import argparse
import io
import sys

import boto3
import botocore.config
import botocore.exceptions


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                env[k] = v
    return env


def client(env):
    cfg = botocore.config.Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},  # rgw here has no wildcard DNS for virtual hosts
        retries={"total_max_attempts": 1},  # a check tool: report the first failure, no retry
        connect_timeout=10,
        read_timeout=60,
    )
    return boto3.client(
        "s3",
        endpoint_url=env["GPUCACHE_S3_ENDPOINT"],
        region_name=env.get("GPUCACHE_S3_REGION", "us-east-1"),
        aws_access_key_id=env["GPUCACHE_S3_ACCESS_KEY"],
        aws_secret_access_key=env["GPUCACHE_S3_SECRET_KEY"],
        config=cfg,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", required=True, help="the env file rgw.sh start wrote")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("create-bucket").add_argument("name")
    sub.add_parser("list").add_argument("prefix", nargs="?", default="")
    g = sub.add_parser("get")
    g.add_argument("key")
    g.add_argument("outfile")
    p = sub.add_parser("put")
    p.add_argument("key")
    p.add_argument("infile")
    sub.add_parser("delete").add_argument("key")
    a = ap.parse_args()

    env = read_env(a.env)
    s3 = client(env)
    bucket = env.get("GPUCACHE_S3_BUCKET")
    try:
        if a.cmd == "create-bucket":
            # No CreateBucketConfiguration: rgw rejects a LocationConstraint that does not name
            # its zonegroup ("default"), and none means "the default one".
            try:
                s3.create_bucket(Bucket=a.name)
            except s3.exceptions.BucketAlreadyOwnedByYou:
                pass  # idempotent
        elif a.cmd == "list":
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=a.prefix):
                for obj in page.get("Contents", []):
                    print(obj["Key"])
        elif a.cmd == "get":
            body = s3.get_object(Bucket=bucket, Key=a.key)["Body"].read()
            if a.outfile == "-":
                sys.stdout.buffer.write(body)
            else:
                with open(a.outfile, "wb") as f:
                    f.write(body)
        elif a.cmd == "put":
            # A file object, not bytes: botocore then sends Expect: 100-continue, as libcurl
            # does for large bodies, so the proxy's handling of it is exercised too.
            with (io.BytesIO(sys.stdin.buffer.read()) if a.infile == "-" else open(a.infile, "rb")) as f:
                s3.put_object(Bucket=bucket, Key=a.key, Body=f)
        elif a.cmd == "delete":
            s3.delete_object(Bucket=bucket, Key=a.key)
    except botocore.exceptions.ClientError as e:
        err = e.response.get("Error", {})
        print(f"s3_check: {a.cmd}: {err.get('Code')}: {err.get('Message') or e}", file=sys.stderr)
        return 1
    except botocore.exceptions.BotoCoreError as e:  # connection refused, timeouts
        print(f"s3_check: {a.cmd}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
