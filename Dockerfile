# The gateway's image: `docker build -t REGISTRY/mcp-oauth-gateway:TAG .`
# Runs as an unprivileged user on a read-only root filesystem (deploy/deployment.yaml).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /opt/gateway \
 && /opt/gateway/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/gateway/bin/pip install --no-cache-dir . \
 && /opt/gateway/bin/python -m compileall -q /opt/gateway

FROM python:3.11-slim
COPY --from=build /opt/gateway /opt/gateway
ENV PATH=/opt/gateway/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["mcp-oauth-gateway"]
CMD ["serve", "--in-cluster", "--host=0.0.0.0", "--admin-port=9090", "--admin-host=0.0.0.0"]
