#!/bin/sh
# Handler of the streaming chat function (template.yaml ChatStreamFunction): the AWS Lambda Web Adapter runs this
# command, then forwards each Function URL invocation to the app it serves on 127.0.0.1:$AWS_LWA_PORT
# (ragstep.entry.aws.stream_url). The layers' packages (/opt/python) come first on the path, as for a handler the
# runtime imports.
PYTHONPATH="/opt/python${LAMBDA_RUNTIME_DIR:+:$LAMBDA_RUNTIME_DIR}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPATH
exec python -m ragstep.entry.aws.stream_url
