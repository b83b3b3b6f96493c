//! The kubelet's plugin watcher finds a plugin by a socket in its `plugins_registry` directory
//! serving `pluginregistration.Registration`: it calls `GetInfo`, registers the endpoint the
//! answer names with the manager of the plugin's type (device plugins, DRA drivers), and
//! reports the outcome with `NotifyRegistrationStatus` (kubernetes
//! `pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go`). The device plugin
//! (`--plugins-registry`) and the DRA driver answer it with this one service; each says what
//! the outcome means to it through [`RegistrationOutcome`].

use edgegpu_kubelet_api::pluginregistration::registration_server::{
    Registration, RegistrationServer,
};
use edgegpu_kubelet_api::pluginregistration::{
    InfoRequest, PluginInfo, RegistrationStatus, RegistrationStatusResponse,
};
use tonic::{Request, Response, Status};

/// What a program does with the kubelet's verdict (count it, log it).
pub trait RegistrationOutcome: Send + Sync + 'static {
    /// The kubelet registered the plugin `info` describes.
    fn registered(&self, info: &PluginInfo);
    /// The kubelet refused it, for `error`.
    fn refused(&self, info: &PluginInfo, error: &str);
}

/// Answers the plugin watcher with `info`, and hands its verdict to `outcome`.
pub struct RegistrationService<O> {
    info: PluginInfo,
    outcome: O,
}

impl<O: RegistrationOutcome> RegistrationService<O> {
    pub fn new(info: PluginInfo, outcome: O) -> Self {
        RegistrationService { info, outcome }
    }

    /// Wraps the service for tonic.
    pub fn into_server(self) -> RegistrationServer<Self> {
        RegistrationServer::new(self)
    }
}

#[tonic::async_trait]
impl<O: RegistrationOutcome> Registration for RegistrationService<O> {
    async fn get_info(
        &self,
        _request: Request<InfoRequest>,
    ) -> Result<Response<PluginInfo>, Status> {
        tracing::debug!(
            "Kubelet plugin watcher asked for the plugin info of {} '{}'",
            self.info.r#type,
            self.info.name
        );
        Ok(Response::new(self.info.clone()))
    }

    async fn notify_registration_status(
        &self,
        request: Request<RegistrationStatus>,
    ) -> Result<Response<RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            self.outcome.registered(&self.info);
        } else {
            self.outcome.refused(&self.info, &status.error);
        }
        Ok(Response::new(RegistrationStatusResponse {}))
    }
}
