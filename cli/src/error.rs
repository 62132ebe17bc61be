//! What can go wrong, said once: each error names what was asked and, for
//! a refusal, the permission that is missing (verb, resource, namespace), as
//! `kubectl auth can-i` would ask it. Exit codes follow kubectl: 1 for any
//! error from the cluster or the input, 2 for a command line clap refuses.

use std::fmt;

/// A permission a read or write needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// `get`, `list`, `patch`.
    pub verb: &'static str,
    /// `resource.group` (`pendingunits.visibility.koord-queue.io`), or the
    /// resource alone for the core group (`events`).
    pub resource: String,
    /// The namespace asked about; `None` for every namespace or a
    /// cluster-scoped resource.
    pub namespace: Option<String>,
    /// The object's name, when one is asked for.
    pub name: Option<String>,
}

impl Access {
    /// `verb` on `resource` in `namespace` (`None`: cluster-wide).
    pub fn new(verb: &'static str, resource: impl Into<String>, namespace: Option<&str>) -> Self {
        Self {
            verb,
            resource: resource.into(),
            namespace: namespace.map(str::to_string),
            name: None,
        }
    }

    /// The same access to the object named `name`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// The `kubectl auth can-i` question that checks it.
    pub fn can_i(&self) -> String {
        let target = match &self.name {
            Some(n) => format!("{}/{n}", self.resource),
            None => self.resource.clone(),
        };
        match &self.namespace {
            Some(ns) => format!("kubectl auth can-i {} {target} -n {ns}", self.verb),
            None => format!("kubectl auth can-i {} {target} -A", self.verb),
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if let Some(n) = &self.name {
            write!(f, " named {n}")?;
        }
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => f.write_str(" cluster-wide"),
        }
    }
}

/// An error of the CLI.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The arguments name something that cannot be (an unknown kind, say).
    #[error("{0}")]
    Usage(String),
    /// No usable kubeconfig or in-cluster configuration.
    #[error("cannot connect: {0}")]
    Config(String),
    /// RBAC refused a request.
    #[error(
        "forbidden: you need permission to {access} (check: {can_i})\n  the API server said: {message}",
        can_i = access.can_i()
    )]
    Forbidden {
        /// What was refused.
        access: Access,
        /// The API server's own words.
        message: String,
    },
    /// The object asked for does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The job exists but is not queued (no unit).
    #[error("{0}")]
    NotQueued(String),
    /// Any other error of the API server or the connection.
    #[error("{what}: {message}")]
    Api {
        /// What was being done.
        what: String,
        /// The error.
        message: String,
    },
    /// Writing the output failed (a closed pipe, say).
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The process's exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            _ => 1,
        }
    }

    /// The error of a request for `access`, from kube's error.
    pub fn from_kube(access: &Access, error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) if status.code == 403 => Self::Forbidden {
                access: access.clone(),
                message: status.message,
            },
            kube::Error::Api(status) if status.code == 404 => Self::NotFound(match &access.name {
                Some(n) => format!("{} {n}", access.resource),
                None => access.resource.clone(),
            }),
            other => Self::Api {
                what: format!("cannot {access}"),
                message: other.to_string(),
            },
        }
    }

    /// Whether the error is a refusal by RBAC.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Self::Forbidden { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_verb_the_resource_and_the_namespace() {
        let access = Access::new(
            "list",
            "pendingunits.visibility.koord-queue.io",
            Some("team-b"),
        );
        let e = CliError::Forbidden {
            access,
            message: "no".into(),
        };
        assert_eq!(
            e.to_string(),
            "forbidden: you need permission to list pendingunits.visibility.koord-queue.io in namespace team-b (check: kubectl auth can-i list pendingunits.visibility.koord-queue.io -n team-b)\n  the API server said: no"
        );
        assert_eq!(e.exit_code(), 1);
    }
}
