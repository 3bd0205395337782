//! `lc-cli mark KEY [--clear]`: show or clear a key's mark, the highest
//! `--order` whose command ended with status 0 (docs/deploy-queues.md).

use anyhow::{Context, Result};

use super::OrFail;
use crate::backend::{check_extras, fields::Extras, BackendConfig};
use crate::cli::MarkArgs;
use crate::exit::{fail, ExitCode};

pub(crate) fn run(config: &BackendConfig, args: MarkArgs) -> Result<ExitCode> {
    let key = args.key.as_str();
    let verb = if args.clear { "mark --clear" } else { "mark" };
    let context = || format!("{verb} '{key}' on {}", config.shown());
    // Refused at once where the backend keeps no marks.
    let order = Extras {
        order: Some(0),
        ..Extras::default()
    };
    check_extras(&*config.server, &config.shown(), &order)
        .or_fail()
        .with_context(context)?;
    super::block_on(async {
        let backend = super::connect_for(config, &[key])
            .await
            .with_context(context)?;
        let answer = if args.clear {
            backend.clear_mark(key).await.map(|had| had.then_some(0))
        } else {
            backend.mark(key).await
        };
        backend.close().await;
        match answer.or_fail().with_context(context)? {
            Some(_) if args.clear => Ok(ExitCode::Success),
            Some(mark) => {
                println!("{mark}");
                Ok(ExitCode::Success)
            }
            // Not a failure of lc-cli: the status of "nothing there".
            None => Err(fail(
                ExitCode::Conflict,
                format!("{}: it has no mark", context()),
            )),
        }
    })
}
