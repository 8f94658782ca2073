/*
 * server_page.c — the page served at GET /: a chat with streaming output
 * (POST /v1/chat/completions, "stream": true) and a live view of the KV pool
 * (polls GET /v1/kv). One self-contained HTML document, no external resources.
 */
#include "server.h"

const char srv_page_html[] =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>kvinfer</title>\n"
    "<style>body{font-family:sans-serif;margin:0;display:flex;height:100vh}"
    "#chat{flex:2;display:flex;flex-direction:column;padding:12px}"
    "#log{flex:1;overflow:auto;white-space:pre-wrap;border:1px solid #ccc;padding:8px}"
    "#kv{flex:1;padding:12px;border-left:1px solid #ccc;font-size:14px}"
    ".u{color:#036}.a{color:#222}#bar{height:18px;background:#eee;position:relative}"
    "#used{height:18px;background:#4a8;width:0}</style></head><body>\n"
    "<div id=\"chat\"><div id=\"log\"></div><form id=\"f\"><input id=\"q\" style=\"width:80%\" "
    "placeholder=\"Say something\"><button>Send</button></form></div>\n"
    "<div id=\"kv\"><h3>KV cache</h3><div id=\"bar\"><div id=\"used\"></div></div><pre id=\"kvt\"></pre>"
    "<h3>Last request</h3><pre id=\"last\"></pre></div>\n"
    "<script>\n"
    "const msgs=[];const log=document.getElementById('log');\n"
    "function add(cls,t){const d=document.createElement('div');d.className=cls;d.textContent=t;log.appendChild(d);return d;}\n"
    "document.getElementById('f').onsubmit=async e=>{e.preventDefault();const q=document.getElementById('q');"
    "const text=q.value;q.value='';msgs.push({role:'user',content:text});add('u','> '+text);const d=add('a','');"
    "const r=await fetch('/v1/chat/completions',{method:'POST',headers:{'Content-Type':'application/json'},"
    "body:JSON.stringify({messages:msgs,stream:true,max_tokens:128,stream_options:{include_usage:true}})});"
    "const rd=r.body.getReader();const dec=new TextDecoder();let buf='',out='';"
    "for(;;){const {done,value}=await rd.read();if(done)break;buf+=dec.decode(value,{stream:true});let i;"
    "while((i=buf.indexOf('\\n\\n'))>=0){const ev=buf.slice(0,i);buf=buf.slice(i+2);if(!ev.startsWith('data: '))continue;"
    "const p=ev.slice(6);if(p==='[DONE]')continue;const j=JSON.parse(p);"
    "if(j.usage){document.getElementById('last').textContent=JSON.stringify(j.usage,null,1);}"
    "for(const c of j.choices||[]){if(c.delta&&c.delta.content){out+=c.delta.content;d.textContent=out;}}}}"
    "msgs.push({role:'assistant',content:out});};\n"
    "async function poll(){try{const k=await (await fetch('/v1/kv')).json();"
    "document.getElementById('used').style.width=(100*k.blocks_used/Math.max(1,k.blocks_total))+'%';"
    "document.getElementById('kvt').textContent='blocks used '+k.blocks_used+' / '+k.blocks_total+"
    "' (block = '+k.block_size+' tokens)\\nbytes used '+k.bytes_used+'\\ntokens cached '+k.tokens+"
    "'\\nrunning '+k.running+', waiting '+k.waiting+'\\nsteps '+k.steps+', prefill rows '+k.prefill_tokens+"
    "', decode rows '+k.decode_tokens+'\\npreemptions '+k.preemptions;}catch(e){}setTimeout(poll,500);}poll();\n"
    "</script></body></html>\n";
