//! What a kubelet and the Service network would do for Koord-Queue's pods,
//! on a local control plane that has neither: the containers of the
//! chart's Deployments run as processes of the harness, from their images
//! (pulled from a registry), with their pod's args and env, the Secrets and
//! ConfigMaps they mount written as files the way the kubelet writes them
//! (and rewritten when they change),
//! and their ServiceAccount's identity (a TokenRequest kubeconfig in place
//! of the mounted token). kwok reports the pods Running; these processes do
//! the work. Their listening addresses move to free loopback ports, and the
//! API server reaches a Service through [`ServiceNetwork`]: an HTTP CONNECT
//! proxy it sends its "cluster" traffic to (`--egress-selector-config-file`),
//! which connects a Service's ClusterIP and port to the process serving it.
//! The API server still calls the webhook by its Service and checks its
//! certificate against the Service's name, as in a cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec, Secret, Service};
use kube::api::Api;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::ControlPlane;
use crate::oci::Image;
use crate::process::{Process, free_port};

/// The processes standing in for the pods of one release.
#[derive(Debug)]
pub struct Pods {
    /// One process per Deployment, by Deployment name.
    pub processes: BTreeMap<String, Process>,
    /// The tasks that keep mounted Secrets and ConfigMaps up to date.
    syncs: Vec<tokio::task::JoinHandle<()>>,
    /// Where the webhook serves admission reviews.
    pub webhook_addr: Option<SocketAddr>,
    /// Admin endpoints by Deployment name.
    pub admin_addrs: BTreeMap<String, SocketAddr>,
}

impl Pods {
    /// An error with a log tail if a process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        for p in self.processes.values_mut() {
            p.check_alive()?;
        }
        Ok(())
    }

    /// Stops every process (the pods are gone).
    pub fn stop(mut self) {
        for task in &self.syncs {
            task.abort();
        }
        for p in self.processes.values_mut() {
            p.terminate(Duration::from_secs(5));
        }
    }
}

/// A Secret's or ConfigMap's data, as files.
type Files = BTreeMap<String, Vec<u8>>;

/// What a volume mount of the pod holds, read from the API (waits up to
/// 120 s for a Secret that does not exist yet, as a kubelet keeps a pod in
/// ContainerCreating).
async fn volume_files(client: &kube::Client, ns: &str, pod: &PodSpec, name: &str) -> Result<Files> {
    let volume = pod
        .volumes
        .as_ref()
        .and_then(|v| v.iter().find(|v| v.name == name))
        .with_context(|| format!("no volume {name}"))?;
    let (data, items): (Files, _) = if let Some(secret) = &volume.secret {
        let secret_name = secret
            .secret_name
            .clone()
            .context("secret volume without a name")?;
        let api: Api<Secret> = Api::namespaced(client.clone(), ns);
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let found = loop {
            if let Some(s) = api.get_opt(&secret_name).await? {
                break s;
            }
            if std::time::Instant::now() > deadline {
                bail!("Secret {ns}/{secret_name} of volume {name} does not appear");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let data = found
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        (data, secret.items.clone())
    } else if let Some(cm) = &volume.config_map {
        let found = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get(&cm.name)
            .await?;
        let data = found
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        (data, cm.items.clone())
    } else if volume.empty_dir.is_some() {
        (Files::new(), None)
    } else {
        bail!("volume {name}: only secret, configMap and emptyDir volumes are run here");
    };
    Ok(match items {
        None => data,
        Some(items) => items
            .into_iter()
            .filter_map(|i| data.get(&i.key).map(|d| (i.path, d.clone())))
            .collect(),
    })
}

/// Writes `files` into `dir` as the kubelet does (a timestamped directory
/// behind the `..data` link).
fn write_volume(dir: &Path, files: &Files) -> Result<()> {
    let list: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    crate::cert_manager::write_like_kubelet(dir, &list)
}

/// Rewrites a mounted volume when its Secret or ConfigMap changes, as the
/// kubelet does (it checks about once a minute; this, every second).
fn keep_in_sync(
    client: kube::Client,
    ns: String,
    pod: PodSpec,
    volume: String,
    dir: PathBuf,
    mut current: Files,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match volume_files(&client, &ns, &pod, &volume).await {
                Ok(files) if files != current => {
                    if let Err(error) = write_volume(&dir, &files) {
                        tracing::warn!(%error, volume, "cannot update a mounted volume");
                        continue;
                    }
                    tracing::info!(volume, "mounted volume updated");
                    current = files;
                }
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, volume, "volume not readable"),
            }
        }
    })
}

/// The pod spec of Deployment `ns/name` and its container `index`.
async fn template(
    client: &kube::Client,
    ns: &str,
    name: &str,
    index: usize,
) -> Result<(PodSpec, Container)> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .with_context(|| format!("reading Deployment {ns}/{name}"))?;
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .with_context(|| format!("Deployment {name} has no pod template"))?;
    let container = pod
        .containers
        .get(index)
        .cloned()
        .with_context(|| format!("Deployment {name} has no container {index}"))?;
    Ok((pod, container))
}

/// `registry/repository:tag` → (repository, tag), for a reference in `registry`.
fn split_image<'a>(image: &'a str, registry: &str) -> Result<(&'a str, &'a str)> {
    let rest = image
        .strip_prefix(registry)
        .and_then(|r| r.strip_prefix('/'))
        .with_context(|| format!("image {image} is not in registry {registry}"))?;
    rest.rsplit_once(':')
        .with_context(|| format!("image {image} has no tag"))
}

/// Runs container `index` of Deployment `ns/name` from its image in the
/// plain-HTTP registry `registry` (`host:port`), as its pod would. Returns the process and the loopback port each
/// `0.0.0.0:<port>` arg was moved to.
async fn run_deployment(
    cp: &ControlPlane,
    ns: &str,
    name: &str,
    index: usize,
    registry: SocketAddr,
    syncs: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<(Process, BTreeMap<u16, u16>)> {
    let client = cp.client().await?;
    let (pod, container) = template(&client, ns, name, index).await?;
    let dir = match index {
        0 => cp.dir().join("pods").join(name),
        _ => cp
            .dir()
            .join("pods")
            .join(format!("{name}-{}", container.name)),
    };
    std::fs::create_dir_all(&dir)?;
    let image = container
        .image
        .clone()
        .context("container without an image")?;
    let (repository, tag) = split_image(&image, &registry.to_string())?;
    let pulled = Image::pull(registry, repository, tag, &dir.join("image"))
        .with_context(|| format!("pulling {image}"))?;
    let user = pulled.config["config"]["User"].as_str().unwrap_or_default();
    anyhow::ensure!(user.starts_with("65532"), "{image} runs as {user:?}");

    // Volumes: mountPath → a directory of the pod.
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for mount in container.volume_mounts.clone().unwrap_or_default() {
        let local = dir
            .join("volumes")
            .join(mount.mount_path.trim_start_matches('/'));
        let files = volume_files(&client, ns, &pod, &mount.name).await?;
        write_volume(&local, &files)?;
        syncs.push(keep_in_sync(
            client.clone(),
            ns.to_string(),
            pod.clone(),
            mount.name.clone(),
            local.clone(),
            files,
        ));
        mounts.push((mount.mount_path.clone(), local));
    }
    let pod_name = format!("{name}-local-0");
    let mut ports = BTreeMap::new();
    let mut args = Vec::new();
    for arg in container.args.clone().unwrap_or_default() {
        let mut arg = arg.replace("$(POD_NAME)", &pod_name);
        for (path, local) in &mounts {
            arg = arg.replace(path.as_str(), &local.display().to_string());
        }
        if let Some((flag, port)) = arg.split_once("=0.0.0.0:")
            && let Ok(port) = port.parse::<u16>()
        {
            let local = free_port()?;
            ports.insert(port, local);
            arg = format!("{flag}=127.0.0.1:{local}");
        }
        args.push(arg);
    }
    let mut env: Vec<(String, std::ffi::OsString)> = Vec::new();
    for var in container.env.clone().unwrap_or_default() {
        if let Some(value) = var.value {
            env.push((var.name, value.into()));
        } else if var
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .is_some_and(|f| f.field_path == "metadata.name")
        {
            env.push((var.name, pod_name.clone().into()));
        }
    }
    let account = pod
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let kubeconfig =
        crate::install::service_account_kubeconfig(cp, ns, &account, Duration::from_secs(3600))
            .await?;
    env.push(("KUBECONFIG".into(), kubeconfig.into_os_string()));
    let env_refs: Vec<(&str, &std::ffi::OsStr)> = env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_os_str()))
        .collect();
    let process = Process::start_with_env(
        name,
        &pulled.entrypoint_path()?,
        &args,
        &env_refs,
        dir.join("container.log"),
    )?;
    Ok((process, ports))
}

/// The Service network the local control plane lacks: an HTTP CONNECT
/// proxy on loopback that joins `<ClusterIP>:<port>` to the process serving
/// that Service. kube-apiserver sends its calls to Services (webhooks)
/// through it, configured by [`ServiceNetwork::egress_config`].
#[derive(Debug, Clone)]
pub struct ServiceNetwork {
    socket: PathBuf,
    routes: Arc<Mutex<BTreeMap<String, SocketAddr>>>,
}

impl ServiceNetwork {
    /// Listens on the Unix socket `socket` (kube-apiserver's HTTP CONNECT
    /// egress over TCP requires TLS; over a Unix socket it does not), on
    /// the current runtime.
    pub async fn start(socket: &Path) -> Result<Self> {
        let listener = tokio::net::UnixListener::bind(socket)
            .with_context(|| format!("binding {}", socket.display()))?;
        let this = Self {
            socket: socket.to_path_buf(),
            routes: Arc::default(),
        };
        let routes = this.routes.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let routes = routes.clone();
                tokio::spawn(async move {
                    if let Err(error) = tunnel(stream, routes).await {
                        tracing::debug!(%error, "service network: connection dropped");
                    }
                });
            }
        });
        Ok(this)
    }

    /// The EgressSelectorConfiguration that sends kube-apiserver's cluster
    /// traffic through this proxy.
    pub fn egress_config(&self) -> String {
        format!(
            "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\negressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: HTTPConnect\n    transport:\n      uds:\n        udsName: {}\n",
            self.socket.display()
        )
    }

    /// Joins `target` (`<ClusterIP>:<port>`) to `to`.
    pub fn route(&self, target: String, to: SocketAddr) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.insert(target, to);
        }
    }
}

/// One CONNECT: the request line names the target; 200, then bytes both ways.
async fn tunnel(
    stream: tokio::net::UnixStream,
    routes: Arc<Mutex<BTreeMap<String, SocketAddr>>>,
) -> Result<()> {
    let mut reader = BufReader::new(stream);
    let mut request = String::new();
    reader.read_line(&mut request).await?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await? == 0 || header == "\r\n" {
            break;
        }
    }
    let target = request
        .strip_prefix("CONNECT ")
        .and_then(|r| r.split_whitespace().next())
        .context("not a CONNECT request")?
        .to_string();
    let to = routes
        .lock()
        .map_err(|_| anyhow::anyhow!("routes poisoned"))?
        .get(&target)
        .copied();
    let mut client = reader.into_inner();
    let Some(to) = to else {
        client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            .await?;
        bail!("no route to {target}");
    };
    let mut upstream = tokio::net::TcpStream::connect(to).await?;
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Runs the pods of release `release` in `ns` (Deployments
/// `<release>-certs` if present, `<release>-webhook`, `<release>-scheduler`)
/// from their images in `registry`, joins the webhook's Service to the
/// webhook in `network`, and waits until the webhook and the scheduler are
/// ready and the API server calls the webhook.
pub async fn run_release(
    cp: &ControlPlane,
    ns: &str,
    release: &str,
    registry: SocketAddr,
    network: &ServiceNetwork,
) -> Result<Pods> {
    let client = cp.client().await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let mut pods = Pods {
        processes: BTreeMap::new(),
        syncs: Vec::new(),
        webhook_addr: None,
        admin_addrs: BTreeMap::new(),
    };
    let certs = format!("{release}-certs");
    let webhook = format!("{release}-webhook");
    let scheduler = format!("{release}-scheduler");
    if let Some(deployment) = deployments.get_opt(&certs).await? {
        // Every container: the webhook's bootstrap and, with the visibility
        // API, its own.
        let containers = deployment
            .spec
            .and_then(|s| s.template.spec)
            .map_or(0, |p| p.containers.len());
        for index in 0..containers {
            let (p, _) = run_deployment(cp, ns, &certs, index, registry, &mut pods.syncs).await?;
            let key = match index {
                0 => certs.clone(),
                _ => format!("{certs}/{index}"),
            };
            pods.processes.insert(key, p);
        }
    }
    let mut visibility_addr = None;
    for name in [&webhook, &scheduler] {
        let (p, ports) = run_deployment(cp, ns, name, 0, registry, &mut pods.syncs).await?;
        let (_, container) = template(&client, ns, name, 0).await?;
        for port in container.ports.unwrap_or_default() {
            let Some(local) = u16::try_from(port.container_port)
                .ok()
                .and_then(|p| ports.get(&p))
            else {
                continue;
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], *local));
            match port.name.as_deref() {
                Some("https") => pods.webhook_addr = Some(addr),
                Some("admin") => {
                    pods.admin_addrs.insert(name.clone(), addr);
                }
                Some("visibility") => visibility_addr = Some(addr),
                _ => {}
            }
        }
        pods.processes.insert(name.clone(), p);
    }
    // The webhook's Service, joined to the webhook's port.
    let addr = pods.webhook_addr.context("the webhook has no https port")?;
    let service = Api::<Service>::namespaced(client.clone(), ns)
        .get(&webhook)
        .await?;
    let spec = service.spec.context("the webhook's Service has no spec")?;
    let ip = spec
        .cluster_ip
        .context("the webhook's Service has no ClusterIP")?;
    for port in spec.ports.unwrap_or_default() {
        network.route(format!("{ip}:{}", port.port), addr);
    }
    // The visibility API's Service, joined to the scheduler's port: the
    // aggregation layer reaches it as in a cluster.
    if let Some(addr) = visibility_addr
        && let Some(service) = Api::<Service>::namespaced(client.clone(), ns)
            .get_opt(&format!("{release}-visibility"))
            .await?
        && let Some(ip) = service.spec.and_then(|s| s.cluster_ip)
    {
        network.route(format!("{ip}:443"), addr);
    }
    for (name, admin) in pods.admin_addrs.clone() {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            pods.check_alive()?;
            if matches!(crate::admin::get(admin, "/readyz").await, Ok((200, _))) {
                break;
            }
            if std::time::Instant::now() > deadline {
                bail!("{name} not ready at {admin} after 90s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let probe_ns = crate::fixtures::create_namespace(&client, true).await?;
    crate::install::wait_webhook_effective(&client, &probe_ns).await?;
    Ok(pods)
}
