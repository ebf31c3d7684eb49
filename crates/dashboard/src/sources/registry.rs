//! What the registry holds for each module's planned ref (a HEAD on its manifest).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::app::msg::{PollParams, RegistryAnswer, SourceData, SourceError};
use crate::backends::registry::{Published, repository_in};

use super::poll::BoxFuture;
use super::session::Session;

pub(crate) fn poll(
    session: Arc<Session>,
    params: PollParams,
) -> BoxFuture<Result<SourceData, SourceError>> {
    Box::pin(async move {
        session
            .registry(|client| async move {
                let mut answers = BTreeMap::new();
                for (module, reference) in params.refs.iter() {
                    let (repository, tag) = repository_in(client.host(), reference);
                    let answer = match client.manifest(repository, tag).await {
                        Ok(Published::Present { digest }) => RegistryAnswer::Published(digest),
                        Ok(Published::Absent) => RegistryAnswer::Absent,
                        Err(error) => RegistryAnswer::Failed(error.to_string()),
                    };
                    answers.insert(module.clone(), answer);
                }
                Ok(SourceData::Registry(answers))
            })
            .await
    })
}
