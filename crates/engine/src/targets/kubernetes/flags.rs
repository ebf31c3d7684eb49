//! This kind's command-line flags: `--context` and `--namespace` point a single `[target]`
//! elsewhere than the mesh file says. Declared here (the command line flattens them through
//! [`super::super::Overrides`]) and read here only.

/// Where the command line points a Kubernetes target.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Flags {
    /// Kubernetes context (default: the mesh file's, else kubeconfig's current one).
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
    /// Kubernetes namespace (default: the mesh file's, else the mesh name).
    #[arg(long, global = true, value_name = "NAME")]
    namespace: Option<String>,
}

impl Flags {
    /// The first flag given, as typed, in the order `--help` lists them.
    pub(crate) fn first_given(&self) -> Option<&'static str> {
        [
            ("--context", self.context.is_some()),
            ("--namespace", self.namespace.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    /// The context and namespace the target is reached at: the flags win over the mesh file's.
    pub(crate) fn place(
        &self,
        file_context: Option<&String>,
        file_namespace: &str,
    ) -> (Option<String>, String) {
        (
            self.context.clone().or_else(|| file_context.cloned()),
            self.namespace
                .clone()
                .unwrap_or_else(|| file_namespace.to_string()),
        )
    }
}
