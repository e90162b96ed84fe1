# shapfusion image built from local artifacts only: no base image is pulled.
#
# Build context: docker/. scripts/build-image.sh prepares docker/rootfs/ (a shapfusion binary built on this host plus
# the shared libraries it links, found with ldd, and the CA bundle for object stores) and then
# runs `docker build`. With registry access, Dockerfile.registry builds from source on a Rust
# image instead; both produce the same entrypoint.
FROM scratch
COPY rootfs/ /
# LD_LIBRARY_PATH: NVRTC when the image was built with NVRTC_DIR, and the driver library where
# the NVIDIA container toolkit mounts it (a scratch image has no loader cache).
ENV PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    LD_LIBRARY_PATH=/usr/local/lib/nvrtc:/usr/lib/x86_64-linux-gnu:/usr/lib64
USER 65534:65534
EXPOSE 50051 50061
ENTRYPOINT ["/usr/local/bin/shapfusion"]
CMD ["--help"]
